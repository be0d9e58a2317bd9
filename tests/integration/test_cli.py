"""The CLI as a user runs it: produce a combined-format log, run a worker, query as JSON/CSV/PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.settings import Settings

from .helpers import run_worker_to_end

pytestmark = pytest.mark.integration

LOG = """\
1.2.3.4 - - [31/Jan/2020:23:59:10 +0000] "GET /index.html HTTP/1.1" 200 10 "-" "curl/8"
1.2.3.4 - - [31/Jan/2020:23:59:50 +0000] "GET /index.html HTTP/1.1" 200 10 "-" "curl/8"
1.2.3.4 - - [01/Feb/2020:01:00:00 +0100] "GET /index.html HTTP/1.1" 200 10 "-" "curl/8"
46.118.127.106 - - [20/May/2015:12:05:17 +0000] "GET /x.py HTTP/1.1" 200 235 "-" "Mozilla/5.0 (compatible
1.2.3.4 - - [01/Feb/2020:00:30:00 +0000] "POST /api/v1/items?id=7 HTTP/1.1" 201 10 "-" "curl/8"
"""


def preagg(settings: Settings, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, **settings.to_env()}
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def query(settings: Settings, *args: str) -> str:
    """``preagg query hits --site example.com ARGS...``"""
    return preagg(settings, "query", "hits", "--site", "example.com", *args)


def test_produce_clf_query_json_csv_plot(settings: Settings, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(LOG)
    out = preagg(settings, "produce", "hits", str(log), "--format", "clf", "--site", "example.com")
    assert "sent 4 events" in out
    assert "rejected 1 lines: clf=1" in out
    assert f"{log}:4: clf: unbalanced quotes" in out
    # stdin works too (JSON lines)
    out = preagg(
        settings,
        "produce",
        "hits",
        "-",
        "--site",
        "example.com",
        stdin='{"page": "/index.html", "ts": "2020-02-01T00:00:30Z"}\n',
    )
    assert "sent 1 events" in out
    run_worker_to_end(settings)

    series = json.loads(
        query(
            settings,
            "--page",
            "/index.html",
            "--from",
            "2020-01-31T23:58:00Z",
            "--to",
            "2020-02-01T00:01:00Z",
            "--by",
            "minute",
            "--json",
        )
    )
    assert [(p["t"], p["hits"]) for p in series] == [
        ("2020-01-31T23:58:00Z", 0),
        ("2020-01-31T23:59:00Z", 2),
        ("2020-02-01T00:00:00Z", 2),
        ("2020-02-01T00:01:00Z", 0),
    ]
    csv = query(
        settings,
        "--from",
        "2020-01-01",
        "--to",
        "2020-02-29",
        "--by",
        "month",
        "--csv",
    )
    assert csv.splitlines() == ["t,hits", "2020-01-01T00:00:00Z,2", "2020-02-01T00:00:00Z,3"]
    png = tmp_path / "chart.png"
    query(
        settings,
        "--from",
        "2020-01-31",
        "--to",
        "2020-02-01T23:00:00Z",
        "--by",
        "hour",
        "--plot",
        str(png),
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status = preagg(settings, "status")
    assert "lag: 0 messages" in status


def test_produce_and_query_impressions_and_relations(settings: Settings, tmp_path: Path) -> None:
    ratings = tmp_path / "u.data"
    ratings.write_text("1\t10\t5\t881250949\n1\t11\t3\t881250950\n2\t10\t4\t881250951\nnot a row\n")
    out = preagg(settings, "produce", "relations", str(ratings), "--format", "movielens")
    assert "sent 2 events" in out and "rejected 1 lines: movielens=1" in out
    assert "rating_below_4=1" in out
    imps = tmp_path / "imps.jsonl"
    imps.write_text(
        '{"user": 1, "item": 10, "ts": 1700000000}\n{"user": 1, "item": 10, "ts": 1700000100}\n'
        '{"user": "ann", "item": 10, "ts": 1700000200}\n{"user": 1, "item": 10}\n'
    )
    out = preagg(settings, "produce", "impressions", str(imps))
    assert "sent 3 events" in out and "rejected 1 lines: schema=1" in out
    run_worker_to_end(settings, topics=[settings.topic("impressions"), settings.topic("relations")])

    assert json.loads(preagg(settings, "query", "impressions", "--user", "1", "--json")) == [
        {"item": 10, "count": 2}
    ]
    assert json.loads(preagg(settings, "query", "impressions", "--item", "10", "--json")) == [
        {"user": 1, "count": 2},
        {"user": "ann", "count": 1},
    ]
    top = json.loads(preagg(settings, "query", "impressions", "--top", "1", "--day", "2023-11-14", "--json"))
    assert top == [{"item": 10, "count": 3}]
    assert 10 in json.loads(preagg(settings, "query", "related", "--user", "2", "--json"))
    assert {1, 2} <= set(json.loads(preagg(settings, "query", "related", "--item", "10", "--json")))


def test_ordinary_mistakes_are_one_line_and_exit_2(settings: Settings, tmp_path: Path) -> None:
    """A bad date, a missing file, a directory: one line naming it, no traceback."""
    env = {**os.environ, **settings.to_env()}
    cases = [
        (
            ["query", "hits", "--site", "s", "--from", "2015-13-45", "--to", "2015-12-31"],
            "'2015-13-45' is not a time",
        ),
        (["produce", "hits", str(tmp_path / "nosuchfile.log")], "nosuchfile.log: No such file or directory"),
        (["produce", "hits", str(tmp_path)], f"{tmp_path}: Is a directory"),
        # The API's range bounds hold on the CLI too (15.8M rows before).
        (
            ["query", "hits", "--site", "s", "--from", "2000-01-01", "--to", "2030-01-01", "--by", "minute"],
            "--from: the range is longer than by=minute allows (2 days)",
        ),
        (["query", "hits", "--site", "s", "--from", "9999-12-30", "--by", "month"], "--from: 9999-12-30"),
    ]
    for args, says in cases:
        r = subprocess.run(
            [sys.executable, "-m", "pipeline", *args], env=env, capture_output=True, text=True, timeout=120
        )
        errors = [line for line in r.stderr.splitlines() if line.startswith("preagg:")]
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
        assert len(errors) == 1 and says in errors[0], (args, r.stderr)


def test_a_reader_that_leaves_early_ends_the_command_quietly(settings: Settings) -> None:
    """`preagg ... | head`: no BrokenPipeError traceback."""
    env = {**os.environ, **settings.to_env()}
    p = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "schema", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the command writes
    err = p.stderr.read().decode()
    assert p.wait(60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_an_unreachable_store_or_broker_is_one_line_naming_its_url(settings: Settings) -> None:
    """Was 20 s and 80-90 lines of traceback; the password stays hidden."""
    from pipeline.services.embedded import free_port

    closed = free_port()
    down = settings.with_(mongo_url=f"mongodb://app:s3cr%40t@127.0.0.1:{closed}/", connect_timeout=2.0)
    for args in (["query", "hits", "--site", "s", "--from", "now-1h", "--to", "now"], ["setup", "--check"]):
        r = subprocess.run(
            [sys.executable, "-m", "pipeline", *args],
            env={**os.environ, **down.to_env()},
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [x for x in r.stderr.splitlines() if x.startswith("preagg:")]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert (
            len(lines) == 1 and f"MongoDB at mongodb://app:***@127.0.0.1:{closed}/ did not answer" in lines[0]
        )
        assert "s3cr" not in r.stderr
        assert r.stderr.strip().splitlines() == lines  # nothing else: one line
    no_kafka = settings.with_(kafka_url=f"127.0.0.1:{free_port()}")
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", "--interval", "0"],
        env={**os.environ, **no_kafka.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [x for x in r.stderr.splitlines() if x.startswith("preagg:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(lines) == 1 and f"Kafka at {no_kafka.kafka_url} did not answer" in lines[0]
    assert r.stderr.strip().splitlines() == lines, r.stderr  # not the client's own ERROR, nor "Unclosed ..."


def test_produce_fails_past_the_rejected_share_and_suggests_the_format(
    settings: Settings, tmp_path: Path
) -> None:
    """Forgetting --format clf refused every line and exited 0."""
    log = tmp_path / "access.log"
    log.write_text(LOG)
    env = {**os.environ, **settings.to_env()}

    def produce(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "produce", "hits", str(log), *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    forgot = produce()
    assert forgot.returncode == 1, forgot.stderr
    assert "5 of 5 lines refused" in forgot.stderr and "add --format clf" in forgot.stderr
    assert produce("--max-rejected", "1").returncode == 0
    named = produce("--format", "clf")
    assert named.returncode == 0 and "no --site: the site is the file name (access)" in named.stderr
    assert "no --site" not in produce("--format", "clf", "--site", "example.com").stderr


def test_producing_on_the_embedded_broker_is_quiet(settings: Settings, tmp_path: Path) -> None:
    """The broker's refusal of an idempotent producer is expected there, not an error."""
    events = tmp_path / "one.jsonl"
    events.write_text('{"site": "quiet.test", "page": "/", "ts": "2020-02-01T00:00:30Z"}\n')
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "produce", "hits", str(events)],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "sent 1 events" in r.stdout
    assert "InitProducerIdRequest" not in r.stderr and "WARNING" not in r.stderr, r.stderr
