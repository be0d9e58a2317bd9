"""The README walked as a newcomer would: every code block, in order, in a fresh directory.

The README names files of ``../shared/data``; tests use generated data, so the walk
writes generated files of the same formats at those paths (next to a fresh work
directory) and checks the answers it knows exactly. Every line runs as written
unless :data:`CONCRETE` says how a line with alternatives (``a | b``, ``[--opt]``)
runs; a line the walk does not know fails the test, so a new README line gets run.
Each command must exit 0 and print something (an example that prints nothing or
zeros is a failed example), except the shell's own lines in :data:`SILENT`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from pipeline.testing.newcomer import make_dashboard, noisy
from tests.integration.walk import PLACEHOLDER, SILENT, Walk, steps, walking

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: How a line with alternatives or placeholders runs (each of the listed commands).
CONCRETE: dict[str, list[str]] = {
    'eval "$(preagg completion bash)"': ['eval "$(preagg completion bash)" && complete -p preagg'],
    # The walk binds to loopback (this machine's rule); the token is checked below.
    "PREAGG_SERVE_TOKEN=\"$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')\" "
    "PREAGG_SERVE_BIND=0.0.0.0 preagg serve": [
        "PREAGG_SERVE_TOKEN=walk-token PREAGG_SERVE_PORT={port2} preagg serve"
    ],
}
#: Lines not run here, and where they are.
ELSEWHERE = {
    "make demo": "test_make_demo_is_exact_and_quiet below",
    "make test": "this suite",
    ". .venv/bin/activate": "the walk's PATH starts with this interpreter's bin",
}
# -- checks of the answers the walk knows ------------------------------------------


def table_sum(out: str) -> int:
    """Sum of a ``preagg query hits`` table's counts (``YYYY-MM-DD HH:MM[+zzzz]  n`` rows)."""
    return sum(int(m) for m in re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d\S*\s+(\d+)$", out, re.M))


def checks(known: dict[str, object], work: Path) -> dict[str, Callable[[str], None]]:
    hits = known["hits"]

    def hours(out: str) -> None:
        assert table_sum(out) == known["by_hour"], out[-2000:]

    def days(out: str) -> None:
        assert table_sum(out) == hits, out[-2000:]

    def minutes(out: str) -> None:
        rows = json.loads(out)
        assert len(rows) == 60 and sum(r["hits"] for r in rows) == known["root_at_ten"]

    def plot(out: str) -> None:
        assert (work / "may.png").stat().st_size > 1000

    def dst(out: str) -> None:
        rows = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d\S*)\s+(\d+)$", out, re.M)
        assert len(rows) == 25, out
        assert {t for t, n in rows if n == "1"} == {"2026-10-25 02:00+0200", "2026-10-25 02:00+0100"}, out

    def agents(out: str) -> None:
        counts = {value: int(n) for n, value in re.findall(r"^\s*agent\s+(\d+)\s+(\S+)$", out, re.M)}
        assert counts.get("Bot") == known["bots"] and sum(counts.values()) == hits, out

    def no_crawlers(out: str) -> None:
        _has(out, "/about", "/blog")
        assert not re.search(r"/robots\.txt|/feed", out), out

    def people(out: str) -> None:
        assert table_sum(out) == hits - known["bots"], out[-2000:]  # type: ignore[operator]

    def curl_hits(out: str) -> None:
        assert sum(r["hits"] for r in json.loads(out)) == known["by_hour"]

    def curl_pages(out: str) -> None:
        assert [(r["page"], r["hits"]) for r in json.loads(out)] == known["top_pages"][:5]  # type: ignore[index]

    def visitors(out: str) -> None:
        rows = re.findall(r"^(\d{4}-\d\d-\d\d)T00:00:00\s+(\d+)\s+(\d+)\s+(yes|no)", out, re.M)
        want, hits_by_day = known["visitors_by_day"], known["hits_by_day"]
        assert [day for day, *_ in rows] == sorted(want), out  # type: ignore[call-overload]
        for day, n, hits, exact in rows:
            truth = want[day]  # type: ignore[index]
            assert int(hits) == hits_by_day[day], out  # type: ignore[index]
            close = int(n) == truth if exact == "yes" else abs(int(n) - truth) <= 0.05 * truth
            assert close, (day, n, truth)

    def visits(out: str) -> None:
        # The rule applied to the log's lines: the first three days final and equal to it, the
        # last not final yet (its last visits open), never above it.
        want = cast(dict[str, tuple[int, int, int]], known["visits_by_day"])
        rows = [line.split() for line in out.splitlines()[1:] if line[:4].isdigit()]
        assert [r[0] for r in rows] == sorted(want), out
        for r in rows:
            got = (int(r[1]), int(r[2]), int(r[4]))
            if r[0] == "2015-05-20":
                assert r[-1] == "no" and all(g <= w for g, w in zip(got, want[r[0]], strict=True)), out
            else:
                assert r[-1] == "yes" and got == want[r[0]], out

    def root_visitors(out: str) -> None:
        (n,) = re.findall(r"^2015-05-17T00:00:00\s+(\d+)\s+\d+\s+(?:yes|no)", out, re.M)
        truth = known["root_visitors"]
        assert abs(int(n) - truth) <= 0.05 * truth, (out, truth)  # type: ignore[operator]

    def views(out: str) -> None:
        days = dict(re.findall(r"date: '(\d{4}-\d\d-\d\d)',\s+hits: (\d+)", out))
        assert {d: int(n) for d, n in days.items()} == known["hits_by_day"], out
        assert len(re.findall(r"visitors: [1-9]", out)) == len(days), out  # every day counted

    def top_pages(out: str) -> None:
        rows = re.findall(r"^\s*(/\S*)\s+(\d+)$", out, re.M)
        assert [(p, int(n)) for p, n in rows] == known["top_pages"], out  # /favicon.ico first, no rebuild

    return {
        'preagg mongosh --quiet --eval \'db.hits_site_days.find({site: "semicomplete.com"}, '
        "{_id: 0, date: 1, hits: 1, visitors: 1}).toArray()'": views,
        "preagg query hits --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --by hour": hours,
        "preagg query visitors --site semicomplete.com --from 2015-05-17 --to 2015-05-20": visitors,
        "preagg query visits --site semicomplete.com --from 2015-05-17 --to 2015-05-20": visits,
        "preagg query visitors --site semicomplete.com --page / --from 2015-05-17 --to 2015-05-20 "
        "--by total": root_visitors,
        "preagg query hits --site semicomplete.com --page / --from 2015-05-17T10:00 --to 2015-05-17T10:59 "
        "--by minute --json": minutes,
        "preagg query hits --site semicomplete.com --from 2015-05-01 --to 2015-05-31 "
        "--by day --plot may.png": plot,
        "preagg query hits --site shop.example --from 2026-10-25 --to 2026-10-25T23:59 --by hour": dst,
        "preagg query props --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --name agent": agents,
        "curl 'http://127.0.0.1:8900/api/hits?site=semicomplete.com"
        "&from=2015-05-17&to=2015-05-20&by=hour'": curl_hits,
        "curl 'http://127.0.0.1:8900/api/pages?site=semicomplete.com"
        "&from=2015-05-17&to=2015-05-20&limit=5'": curl_pages,
        "preagg query pages --site shop.example --from 2026-10-25": lambda out: _has(out, "/late"),
        "preagg query pages --site semicomplete.com --from 2015-05-17 --to 2015-05-20": top_pages,
        "preagg query impressions --user 7": lambda out: _has(out, "19"),
        "preagg query impressions --item 19": lambda out: _has(out, "7"),
        "preagg query impressions --top 10 --day 2023-11-14": lambda out: _has(out, "19"),
        "preagg query related --user 196": lambda out: _has(out, "242", "302"),
        "preagg query related --item 242": lambda out: _has(out, "196", "22"),
        "preagg query top-tags --user 2 --days 7 --today 2009-04-07 --limit 10": lambda out: _has(
            out, "13", "15"
        ),
        "preagg query hits --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --by day": days,
        "preagg query pages --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --no-bots": no_crawlers,
        "preagg query hits --site semicomplete.com --from 2015-05-17 --to 2015-05-20 "
        "--by day --no-bots": people,
    }


def _has(out: str, *words: str) -> None:
    for word in words:
        assert re.search(rf"(^|\W){re.escape(word)}(\W|$)", out), (word, out)


# -- the walk ----------------------------------------------------------------------


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    with walking(tmp_path) as w:
        yield w


def test_the_readme_walked_in_order(walk: Walk) -> None:
    expect = checks(walk.known, walk.work)
    unknown = [
        line
        for line, run in steps(README.read_text(), CONCRETE)
        if line not in (*ELSEWHERE, *CONCRETE, "python") and PLACEHOLDER.search(run)
    ]
    assert not unknown, f"README lines with placeholders the walk cannot run: {unknown}"
    checked: set[str] = set()
    for line, step in steps(README.read_text(), CONCRETE):
        if line in ELSEWHERE:
            continue
        if line == "python":
            script = walk.work / "example.py"
            script.write_text(step)
            assert "1 hits" in walk.run(f"{sys.executable} example.py")
            continue
        run = step.replace("{port2}", str(walk.ports["port2"]))
        run = run.replace(":8900/", f":{walk.ports['port']}/").replace("=6066 ", f"={walk.ports['web']} ")
        if walk.builtin(run):
            continue
        if run.endswith("&") or run.endswith("preagg serve"):
            run = run.rstrip("&").strip()
            if "PREAGG_HITS_LATENESS" in run:  # "instead of the workers above"
                walk.stop(lambda job: job.endswith("preagg worker") and "PREAGG_HITS_FORMAT" not in job)
            if run == "preagg serve":
                run = f"PREAGG_SERVE_PORT={walk.ports['port']} preagg serve"
            walk.start(run)
            if "preagg serve" in run:
                port = walk.ports["port2" if "walk-token" in run else "port"]
                walk.wait_http(f"http://127.0.0.1:{port}/health")
                if "walk-token" in run:  # a token: refused without it, answered with it
                    with pytest.raises(urllib.error.HTTPError) as refused:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sites", timeout=30)
                    assert refused.value.code == 401
                    walk.wait_http(f"http://127.0.0.1:{port}/api/sites", token="walk-token")
            if "PREAGG_WEB_PORT" in run:
                walk.wait_http(f"http://127.0.0.1:{walk.ports['web']}/health/live")
            continue
        if run == "preagg services down":
            walk.stop()
        out = walk.run(run)
        if not SILENT.match(run):
            assert out.strip(), f"`{run}` printed nothing"
        walk.after(run)
        if step in expect:
            expect[step](out)
            checked.add(step)
    missed = set(expect) - checked
    assert not missed, f"checks of lines the README no longer has: {missed}"


def test_make_demo_is_exact_and_quiet() -> None:
    """`make demo` (the README's first command): exact counts and no warning lines."""
    done = subprocess.run(
        ["make", "-s", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "(expected 60000: exact)" in out, out[-3000:]
    assert "property counts       exact" in out, out[-3000:]
    alarming = noisy(out.splitlines())
    assert not alarming, alarming


def test_make_dashboard_serves_its_url() -> None:
    """`make dashboard`: the demo, then the dashboard at the URL it prints, until stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")}
    with make_dashboard(ROOT, env) as dash:
        if dash.url is None:
            pytest.fail("".join(dash.lines[-40:]))
        with urllib.request.urlopen(dash.url, timeout=60) as page:
            assert "preagg dashboard" in page.read().decode()
        with urllib.request.urlopen(dash.url + "api/sites", timeout=60) as sites:
            assert len(json.loads(sites.read())) == 3
    alarming = noisy(dash.lines)
    assert not alarming, dash.lines
