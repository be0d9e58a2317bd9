"""deploy/kubernetes run as the kubelet runs them: the containers' own arguments and environment.

The manifests' values are read from the files (the ConfigMap, the example Secrets, the
Deployment's ``env`` with ``$(VAR)`` expanded and the namespace from the downward API);
only what points at servers is replaced by the embedded ones, and the address is bound
to loopback on a free port.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from pipeline.services.embedded import free_port
from pipeline.settings import Settings

from ..unit.test_deploy import environment, named, plain
from .helpers import cli

pytestmark = pytest.mark.integration

POD_IP = "10.244.1.7"
NAMESPACE = "analytics"


def fetch(url: str, host: str, token: str = "") -> tuple[int, bytes]:
    headers = {"Host": host, **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


def read_only_url(settings: Settings) -> str:
    """The store's URL for a user that may only read the database (serve's Secret)."""
    assert settings.mongo_url
    user, password = f"serve_{uuid.uuid4().hex[:6]}", secrets.token_urlsafe(12)
    admin: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    admin.admin.command("createUser", user, pwd=password, roles=[{"role": "read", "db": settings.db}])
    admin.close()
    return settings.mongo_url.replace("mongodb://", f"mongodb://{user}:{password}@")


def snapshot(settings: Settings) -> dict[str, int]:
    """Every collection of the database with its number of documents."""
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    try:
        db = client[settings.db]
        return {name: db[name].count_documents({}) for name in db.list_collection_names()}
    finally:
        client.close()


def test_serve_with_its_deployments_arguments_answers_the_kubelets_probes(
    settings: Settings, tmp_path: Path
) -> None:
    """The kubelet probes with ``Host: <pod IP>:<port>`` and Prometheus scrapes the same
    address: both answered; the API keeps refusing a Host it does not serve (421)."""
    docs = plain()
    (c,) = named(docs, "Deployment", "preagg-serve")["spec"]["template"]["spec"]["containers"]
    env = environment(docs, c, namespace=NAMESPACE)
    assert f"preagg-serve.{NAMESPACE}.svc" in env["PREAGG_SERVE_HOSTS"].split(",")
    token = secrets.token_urlsafe(18)
    servers = {
        "PREAGG_KAFKA_URL": settings.kafka_url or "",
        "PREAGG_MONGO_URL": read_only_url(settings),
        "PREAGG_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
        "PREAGG_KAFKA_SSL_CAFILE": "",
        "PREAGG_SERVE_TOKEN": token,
    }
    # this test's own database, topics and group (the setup Job's run made them)
    mine = {
        k: v
        for k, v in settings.to_env().items()
        if k in ("PREAGG_DB", "PREAGG_GROUP_ID") or k.endswith("_TOPIC")
    }
    cli(settings, "setup")
    before = snapshot(settings)
    port = free_port()
    args = list(c["args"])
    args[args.index("--bind") + 1], args[args.index("--port") + 1] = "127.0.0.1", str(port)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")}
    run_env |= {**env, **servers, **mine, "PREAGG_HOME": str(tmp_path)}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", *args], env=run_env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    kubelet = f"{POD_IP}:{port}"
    try:
        deadline = time.monotonic() + 90
        while fetch(f"{base}/health/live", kubelet)[0] != 200 and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.2)
        assert fetch(f"{base}/health/live", kubelet)[0] == 200
        assert fetch(f"{base}/health/ready", kubelet)[0] == 200, (tmp_path / "serve.log").read_text()[-3000:]
        status, body = fetch(f"{base}/metrics", kubelet)
        while b"preagg_group_waiting_messages{" not in body and time.monotonic() < deadline:
            time.sleep(0.5)
            status, body = fetch(f"{base}/metrics", kubelet)
        assert status == 200 and f'topic="{settings.topic("hits")}"'.encode() in body, body[-2000:]
        assert fetch(f"{base}/api/sites", kubelet, token)[0] == 421  # the API is for the Service's names
        status, body = fetch(f"{base}/api/sites", f"preagg-serve.{NAMESPACE}.svc:{port}", token)
        assert status == 200, body
        assert fetch(f"{base}/api/sites", f"preagg-serve.{NAMESPACE}.svc:{port}")[0] == 401
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, (tmp_path / "serve.log").read_text()[-3000:]
        log.close()
    # The embedded store does not enforce roles, so the read-only user alone proves nothing
    # here: serve wrote nothing at all (its Secret's `read` role is enough on MongoDB).
    assert snapshot(settings) == before
