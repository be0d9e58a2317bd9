"""Answers say when events are still waiting to be counted.

Events produced with no worker running: every API answer says it is not complete
(``envelope=true``'s ``pending``, the headers, ``/api/pending``), that no worker counts
them (stalled), and ``preagg query`` prints one line saying so on stderr, the rows on
stdout as before. Once a worker has counted them, the same answers say complete and the
CLI prints no such line.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.testing.traffic import generate

from .helpers import produce, run_cli, run_worker_to_end
from .test_serve import get, q

pytestmark = pytest.mark.integration


def headers(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return dict(r.headers)


def wait_for(check, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    """The first truthy answer of ``check()`` (the server looks every 2 s)."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "no answer in time"
        time.sleep(0.5)
    return got


def test_answers_say_what_still_waits_to_be_counted(settings: Settings) -> None:
    now = datetime.now(UTC)
    traffic = generate(400, end=now.timestamp(), days=1, seed=41, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=1))
    # The site of the newest event, from an hour before it: the traffic follows a day/night
    # cycle in UTC, so a fixed site's last two hours can hold no hit at all (around midnight).
    site, _, minute = max(traffic.per_minute, key=lambda k: k[2])
    last = datetime.fromtimestamp(minute * 60, UTC)
    day = last.date().isoformat()
    hits = q("/", "/api/hits", site=site, **{"from": (last - timedelta(hours=1)).isoformat()[:16]})
    server = ServeProcess(settings).start()
    try:
        url = server.url.rstrip("/")

        def waiting() -> dict | None:  # type: ignore[type-arg]
            status, body = get(url + hits + "&envelope=true", token=None)
            assert status == 200, body
            return body if body["pending"] and body["pending"]["messages"] else None

        body = wait_for(waiting)
        assert body["pending"]["complete"] is False and body["pending"]["stalled"] is True
        assert body["pending"]["messages"] == len(traffic.lines)
        assert isinstance(body["rows"], list)
        assert headers(url + hits)["Preagg-Complete"] == "false"
        status, every = get(url + "/api/pending", token=None)
        assert status == 200 and every["hits"]["messages"] == len(traffic.lines)
        out = run_cli(settings, "query", "hits", "--site", site, "--from", day)
        assert out.returncode == 0 and out.stdout.strip()
        assert "no worker is counting them" in out.stderr, out.stderr
        status = run_cli(settings, "status", "--interval", "0").stdout
        assert "PROBLEM" in status and re.search(
            r"nothing counts \d partition\(s\) with messages waiting", status
        ), status
        assert "no worker is in the group: start `preagg worker`" in status, status  # says why

        run_worker_to_end(settings)

        def complete() -> dict | None:  # type: ignore[type-arg]
            status, body = get(url + hits + "&envelope=true", token=None)
            return body if status == 200 and body["pending"]["complete"] else None

        body = wait_for(complete)
        assert body["pending"]["messages"] == 0 and sum(r["hits"] for r in body["rows"]) > 0
        assert headers(url + hits)["Preagg-Complete"] == "true"
        out = run_cli(settings, "query", "hits", "--site", site, "--from", day)
        assert out.returncode == 0 and "complete" not in out.stderr, out.stderr
        assert "PROBLEM" not in run_cli(settings, "status", "--interval", "0").stdout
    finally:
        server.terminate()


def test_a_store_that_does_not_answer_is_named_as_such(settings: Settings) -> None:
    """With the store down the dashboard only said "no answer within the request's
    deadline (10 s)"; the 503 now names the store and what to check."""
    from pipeline.services.embedded import free_port

    down = settings.with_(mongo_url=f"mongodb://127.0.0.1:{free_port()}/", query_timeout=3.0)
    server = ServeProcess(down).start()
    try:
        status, body = get(server.url.rstrip("/") + "/api/sites", token=None)
    finally:
        server.terminate()
    assert status == 503, body
    assert "the store (MongoDB at 127.0.0.1:" in body["error"] and "does not answer" in body["error"], body
