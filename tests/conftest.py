"""Fixtures: one pair of embedded services per test session, fresh topics/db/group per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.kinds import named
from pipeline.services.embedded import EmbeddedServices, Endpoints
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    home = tmp_path_factory.mktemp("services")
    svc = EmbeddedServices(home)
    endpoints = svc.start()
    try:
        yield endpoints
    finally:
        svc.stop()


@pytest.fixture
def settings(services: Endpoints, tmp_path: Path) -> Settings:
    """Settings on the session's services with names of this test's own."""
    tag = uuid.uuid4().hex[:8]
    base = named(
        Settings(partitions=3, home=tmp_path, flush_interval=0.5, session_timeout=6.0, log_flushes=True), tag
    )
    return for_embedded(base, services)
