"""Credentials pass through configuration and never reach logs, metrics or status output."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from pymongo import MongoClient

from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import produce

pytestmark = pytest.mark.integration


def test_mongo_credentials_work_and_stay_secret(settings: Settings) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    kafka_password = f"kafka-{uuid.uuid4().hex}"
    assert settings.mongo_url
    admin: MongoClient[dict[str, object]] = MongoClient(settings.mongo_url)
    user = f"app_{uuid.uuid4().hex[:6]}"
    admin.admin.command("createUser", user, pwd=password, roles=["readWrite"])
    admin.close()
    secured = settings.with_(
        mongo_url=settings.mongo_url.replace("mongodb://", f"mongodb://{user}:{password}@"),
        kafka_sasl_password=kafka_password,  # unused with PLAINTEXT; must not leak either
        web_port=free_port(),
    )
    traffic = generate(500, end=time.time(), days=1, seed=9, bad_share=0.02)
    asyncio.run(produce(secured, traffic.lines, pack=20))
    w = WorkerProcess(secured, "secured").start()
    try:
        asyncio.run(wait_caught_up(secured, [secured.topic("hits")], timeout=120))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{secured.web_port}/metrics", timeout=5).read()
        health = urllib.request.urlopen(f"http://127.0.0.1:{secured.web_port}/health", timeout=5).read()
    finally:
        assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    status = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", "--interval", "0"],
        env={**os.environ, **secured.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr[-3000:]
    assert "lag: 0 messages" in status.stdout
    for text in (w.log_path.read_text(), metrics.decode(), health.decode(), status.stdout + status.stderr):
        assert password not in text and kafka_password not in text
