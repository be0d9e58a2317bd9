"""What every benchmark does around its measurements: private embedded services, steps, results."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.services.embedded import EmbeddedServices, for_embedded
from pipeline.settings import Settings


@contextmanager
def embedded(prefix: str, partitions: int = 4) -> Iterator[tuple[Settings, EmbeddedServices]]:
    """Settings on a private pair of embedded services, stopped afterwards."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    svc = EmbeddedServices(home)
    base = for_embedded(Settings(home=home, partitions=partitions), svc.start())
    try:
        yield base, svc
    finally:
        svc.stop()


def step(results: dict[str, Any], key: str, title: str, fn: Callable[[], Any]) -> None:
    """Run one measurement, keep its result under ``key`` and print it."""
    print(f"{title} ...", flush=True)
    results[key] = fn()
    print(json.dumps(results[key]), flush=True)


def write_results(results: dict[str, Any], out: str) -> Path:
    """Write the results as JSON (``bench-results/*.json``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    print(f"results in {path}")
    return path


def latency_ms(times_ms: list[float]) -> dict[str, float]:
    """p50 and p99 of latencies in milliseconds."""
    ordered = sorted(times_ms)
    return {
        "p50_ms": round(ordered[len(ordered) // 2], 2),
        "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 2),
    }
