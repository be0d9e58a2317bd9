"""The README walked as a newcomer would (issue 25): every code block, in order, in a fresh directory.

The README names files of ``../shared/data``; tests use generated data, so the walk
writes generated files of the same formats at those paths (next to a fresh work
directory) and checks the answers it knows exactly. Every line runs as written
unless :data:`CONCRETE` says how a line with alternatives (``a | b``, ``[--opt]``)
runs; a line the walk does not know fails the test, so a new README line gets run.
Each command must exit 0 and print something (an example that prints nothing or
zeros is a failed example), except the shell's own lines in :data:`SILENT`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.services.urls import resolve
from pipeline.settings import Settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent

#: How a line with alternatives or placeholders runs (each of the listed commands).
CONCRETE: dict[str, list[str]] = {
    # a new group id (PREAGG_GROUP_ID) adopting the running group's ledgers; without --apply: the plan
    "preagg positions adopt --from-group OLD": [
        "PREAGG_GROUP_ID=preagg-new preagg positions adopt --from-group preagg"
    ],
    "preagg query impressions --user 7 | --item 19 | --top 10 [--day 2023-11-14]": [
        "preagg query impressions --user 7",
        "preagg query impressions --item 19",
        "preagg query impressions --top 10 --day 2023-11-14",
    ],
    "preagg query related --user 196 | --item 242": [
        "preagg query related --user 196",
        "preagg query related --item 242",
    ],
    "preagg query top-tags --user 2 --days 7 --today 2009-04-07 [--limit 10]": [
        "preagg query top-tags --user 2 --days 7 --today 2009-04-07 --limit 10"
    ],
    "preagg query props --site semicomplete.com --from 2015-05-17 --to 2015-05-20 "
    "[--page /] [--name agent]": [
        "preagg query props --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --name agent"
    ],
    "preagg schema [--mode compact|readable] [--json]": ["preagg schema --mode readable"],
    'eval "$(preagg completion bash)"': ['eval "$(preagg completion bash)" && complete -p preagg'],
    # The walk binds to loopback (this machine's rule); the token is checked below.
    "PREAGG_SERVE_TOKEN=... PREAGG_SERVE_BIND=0.0.0.0 preagg serve": [
        "PREAGG_SERVE_TOKEN=walk-token PREAGG_SERVE_PORT={port2} preagg serve"
    ],
}
#: Lines not run here, and where they are.
ELSEWHERE = {
    "make demo": "test_make_demo_is_exact_and_quiet below",
    "make test": "this suite",
    ". .venv/bin/activate": "the walk's PATH starts with this interpreter's bin",
}
#: Lines that print nothing by design.
SILENT = re.compile(r"^(sleep |export |unset |echo .*> )")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, in order."""
    return re.findall(r"```(sh|python)\n(.*?)```", text, re.S)


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


# -- generated data at the README's paths ------------------------------------------

START = datetime(2015, 5, 17, tzinfo=UTC)
CLF_PAGES = ["/", "/blog/", "/about", "/robots.txt", "/feed", "/images/logo.png"]


def clf_rows(n: int = 2400) -> list[tuple[datetime, str, str]]:
    """(time, page, agent) of a 4-day access log: crawlers on /robots.txt and /feed."""
    rows = []
    for i in range(n):
        page = CLF_PAGES[(i * 7) % len(CLF_PAGES)]
        bot = page in ("/robots.txt", "/feed")
        agent = "Googlebot/2.1" if bot else ("Chrome/120.0 Safari/537.36" if i % 2 else "Firefox/121.0")
        rows.append((START + timedelta(seconds=144 * i), page, agent))
    return rows


def write_data(shared: Path) -> dict[str, object]:
    logs = shared / "data" / "access-logs"
    logs.mkdir(parents=True)
    rows = clf_rows()
    (logs / "apache_logs").write_text(
        "".join(
            f'10.0.0.{i % 250} - - [{t:%d/%b/%Y:%H:%M:%S} +0000] "GET {p} HTTP/1.1" 200 512 '
            f'"http://semicomplete.com/" "{a}"\n'
            for i, (t, p, a) in enumerate(rows)
        )
    )
    ml = shared / "data" / "ml-100k"
    ml.mkdir(parents=True)
    ratings = [(196, 242, 5), (196, 302, 4), (196, 377, 2), (22, 242, 4), (186, 302, 5)]
    (ml / "u.data").write_text("".join(f"{u}\t{i}\t{r}\t881250949\n" for u, i, r in ratings))
    lastfm = shared / "data" / "lastfm-2k"
    lastfm.mkdir(parents=True)
    tagged = [(2, 52, 13), (2, 53, 13), (2, 54, 13), (2, 52, 15), (3, 52, 13)]
    (lastfm / "user_taggedartists.dat").write_text(
        "userID\tartistID\ttagID\tday\tmonth\tyear\n"
        + "".join(f"{u}\t{a}\t{t}\t1\t4\t2009\n" for u, a, t in tagged)
    )
    ten = [(t, p) for t, p, _ in rows if t.hour == 10 and t.day == 17]
    return {
        "hits": len(rows),
        # `--to 2015-05-20` by hour ends with the bucket of 2015-05-20 00:00 (a time, not a day)
        "by_hour": sum(1 for t, _, _ in rows if t < datetime(2015, 5, 20, 1, tzinfo=UTC)),
        "root_at_ten": sum(1 for _, p in ten if p == "/"),
        "bots": sum(1 for _, _, a in rows if "bot" in a.lower()),
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

    def curl_hits(out: str) -> None:
        assert sum(r["hits"] for r in json.loads(out)) == known["by_hour"]

    def curl_pages(out: str) -> None:
        assert len(json.loads(out)) == 5

    return {
        "preagg query hits --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --by hour": hours,
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
        "preagg query impressions --user 7": lambda out: _has(out, "19"),
        "preagg query impressions --item 19": lambda out: _has(out, "7"),
        "preagg query impressions --top 10 --day 2023-11-14": lambda out: _has(out, "19"),
        "preagg query related --user 196": lambda out: _has(out, "242", "302"),
        "preagg query related --item 242": lambda out: _has(out, "196", "22"),
        "preagg query top-tags --user 2 --days 7 --today 2009-04-07 --limit 10": lambda out: _has(
            out, "13", "15"
        ),
        "preagg query hits --site semicomplete.com --from 2015-05-17 --to 2015-05-20 --by day": days,
    }


def _has(out: str, *words: str) -> None:
    for word in words:
        assert re.search(rf"(^|\W){re.escape(word)}(\W|$)", out), (word, out)


# -- the walk ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Walk:
    """A shell-less walk: environment, background jobs and waits a reader does by hand."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")},
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PREAGG_HOME": str(work / ".preagg"),
        }
        self.jobs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.ports = {"port": free_port(), "port2": free_port(), "web": free_port()}
        self.transcript: list[str] = []

    def settings(self) -> Settings:
        return resolve(Settings.from_env({k: v for k, v in self.env.items() if k.startswith("PREAGG_")}))

    def caught_up(self, kind: str) -> None:
        settings = self.settings()
        asyncio.run(wait_caught_up(settings, [settings.topic(kind)], timeout=240))

    def run(self, line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", line], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300
        )
        out = done.stdout + done.stderr
        self.transcript.append(f"$ {line}\n{out}")
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{out[-3000:]}"
        return done.stdout if done.stdout.strip() else out

    def start(self, line: str) -> None:
        log = open(self.work / f"job-{len(self.jobs)}.log", "wb")  # kept open for the job
        proc = subprocess.Popen(
            ["bash", "-c", line],
            cwd=self.work,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the job is its process group: bash and what it runs stop together
        )
        self.jobs.append((line, proc))
        self.transcript.append(f"$ {line} &")

    def stop(self, which: Callable[[str], bool] = lambda line: True) -> None:
        for line, proc in list(self.jobs):
            if which(line) and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.jobs = [(line, p) for line, p in self.jobs if p.poll() is None]

    def wait_http(self, url: str, token: str | None = None) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                req = urllib.request.Request(
                    url, headers={"Authorization": f"Bearer {token}"} if token else {}
                )
                with urllib.request.urlopen(req, timeout=10):
                    return
            except urllib.error.HTTPError:
                return  # it answers
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    work = tmp_path / "work"
    work.mkdir()
    w = Walk(work)
    try:
        yield w
    finally:
        w.stop()
        subprocess.run(
            ["bash", "-c", "preagg services down"], cwd=work, env=w.env, capture_output=True, timeout=120
        )
        print("\n".join(w.transcript)[-20000:])


def steps() -> Iterator[tuple[str, str]]:
    """(documented line, line to run) for each line of each README code block; Python blocks whole."""
    for lang, body in code_blocks(README.read_text()):
        if lang == "python":
            yield "python", body
            continue
        for raw in body.splitlines():
            line = strip_comment(raw)
            if not line:
                continue
            for concrete in CONCRETE.get(line, [line]):
                yield line, concrete


def test_the_readme_walked_in_order(walk: Walk, tmp_path: Path) -> None:
    known = write_data(tmp_path / "shared")
    expect = checks(known, walk.work)
    unknown = [
        line
        for line, run in steps()
        if line not in (*ELSEWHERE, *CONCRETE, "python")
        and re.search(r"\s\|\s+--|\[|\.\.\.|\bOLD\b|YYYY", run)
    ]
    assert not unknown, f"README lines with placeholders the walk cannot run: {unknown}"
    checked: set[str] = set()
    for line, step in steps():
        if line in ELSEWHERE:
            continue
        if line == "python":
            script = walk.work / "example.py"
            script.write_text(step)
            assert "1 hits" in walk.run(f"{sys.executable} example.py")
            continue
        run = step.replace("{port2}", str(walk.ports["port2"]))
        run = run.replace(":8900/", f":{walk.ports['port']}/").replace("=6066 ", f"={walk.ports['web']} ")
        if run.startswith("export "):
            for part in run.split()[1:]:
                name, value = part.split("=", 1)
                walk.env[name] = value
            continue
        if run.startswith("unset "):
            for name in run.split()[1:]:
                walk.env.pop(name, None)
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
        for kind in ("hits", "impressions", "relations", "listens"):
            if re.search(rf"preagg produce {kind}\b", run) or (
                kind == "hits" and "deadletters replay" in run
            ):
                walk.caught_up(kind)
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
    noisy = [line for line in out.splitlines() if re.search(r"\bwarning\b|\berror\b|traceback", line, re.I)]
    assert not noisy, noisy
