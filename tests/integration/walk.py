"""Walking documents' code blocks as a reader would: a fresh directory, its services, background jobs.

Used by ``test_readme_walk`` and ``test_docs_walk``: each line of a ``sh`` block runs
in bash in the work directory, ``&`` lines become jobs (their process group is stopped
at the end), ``export``/``unset`` lines change the environment of the next ones, and
after a line that sends events the walk waits until the workers have counted them,
as a reader would before querying.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from pipeline.core.sessions import Sessions, tally
from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.services.urls import resolve
from pipeline.settings import Settings
from tests.integration.helpers import wait_counted, wait_ledgers_at_end, wait_sealed

BIN = Path(sys.executable).parent
#: Lines that print nothing by design.
SILENT = re.compile(r"^(sleep |export |unset |cp |(echo|printf) .*> )")
#: A line with alternatives or placeholders (``a | --b``, ``[--opt]``, ``FILE...``, ``YYYY``).
PLACEHOLDER = re.compile(r"\s\|\s+--|\s\|\s+\w+$|\[|\.\.\.|\bOLD\b|YYYY|\s[A-Z]{1,2}(\s|$)")
KINDS = ("hits", "impressions", "relations", "listens")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced ``sh`` or ``python`` block, in order."""
    return re.findall(r"```(sh|python)\n(.*?)```", text, re.S)


def js_blocks(text: str) -> list[str]:
    """Each fenced ``js`` block (what a reader types into mongosh), in order."""
    return re.findall(r"```js\n(.*?)```", text, re.S)


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def steps(text: str, concrete: dict[str, list[str]]) -> Iterator[tuple[str, str]]:
    """(documented line, line to run) of each code block line; a Python block whole, as ("python", body)."""
    for lang, body in code_blocks(text):
        if lang == "python":
            yield "python", body
            continue
        for raw in body.splitlines():
            line = strip_comment(raw)
            if line:
                for run in concrete.get(line, [line]):
                    yield line, run


# -- generated data at the documents' ../shared/data paths ------------------------------------------

START = datetime(2015, 5, 17, tzinfo=UTC)
CLF_PAGES = ["/", "/blog/", "/about", "/robots.txt", "/feed", "/images/logo.png"]


def clf_rows(n: int = 2400) -> list[tuple[datetime, str, str]]:
    """(time, page, agent) of a 4-day access log: crawlers on /robots.txt and /feed.

    As in the real log, its top page comes late: a long tail of pages seen once each
    fills the first hours (more than a top-pages budget holds), and ``/favicon.ico``,
    the busiest page, is asked for from the second day on.
    """
    rows = []
    for i in range(n):
        page = CLF_PAGES[(i * 7) % len(CLF_PAGES)]
        if i < 600 and i % 2:
            page = f"/articles/{i:04d}-notes-on-a-long-tail-page"
        elif i >= n // 4 and i % 6 in (3, 4):
            page = "/favicon.ico"
        bot = page in ("/robots.txt", "/feed")
        agent = "Googlebot/2.1" if bot else ("Chrome/120.0 Safari/537.36" if i % 2 else "Firefox/121.0")
        rows.append((START + timedelta(seconds=144 * i), page, agent))
    return rows


def visits_by_day(rows: list[tuple[datetime, str, str]]) -> dict[str, tuple[int, int, int]]:
    """(visits, bounces, views) per UTC day of the log's human lines, by the rule of docs/visits.md
    applied to the lines themselves: a visitor is an address and browser on one day."""
    people: dict[tuple[int, str, date], int] = {}
    s = Sessions()
    closed = []
    for i, (t, p, a) in enumerate(rows):
        if "bot" not in a.lower():
            who = people.setdefault((i % 250, a, t.date()), len(people))
            closed.extend(s.add("semicomplete.com", who, t.timestamp(), p, i))
    closed.extend(s.close(float("inf")))
    totals, _ = tally(closed, lambda _site, ts: datetime.fromtimestamp(ts, UTC).date().toordinal())
    return {date.fromordinal(o).isoformat(): (v.visits, v.bounces, v.views) for (_, o), v in totals.items()}


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
    # Unique visitors: the distinct (client address, browser) pairs of a day's human lines.
    people: dict[str, set[tuple[int, str]]] = {}
    root: set[tuple[date, int, str]] = set()
    for i, (t, p, a) in enumerate(rows):
        if "bot" not in a.lower():
            people.setdefault(t.date().isoformat(), set()).add((i % 250, a))
            if p == "/":
                root.add((t.date(), i % 250, a))
    return {
        "visits_by_day": visits_by_day(rows),
        "visitors_by_day": {day: len(pairs) for day, pairs in people.items()},
        "hits_by_day": dict(Counter(t.date().isoformat() for t, _, _ in rows)),
        # --by total with the daily salt: each day's visitors of / added up
        "root_visitors": len(root),
        "hits": len(rows),
        # `--to 2015-05-20` by hour: a date is its whole day, so the 20th's hours are all there
        "by_hour": sum(1 for t, _, _ in rows if t < datetime(2015, 5, 21, tzinfo=UTC)),
        "root_at_ten": sum(1 for _, p in ten if p == "/"),
        "bots": sum(1 for _, _, a in rows if "bot" in a.lower()),
        # pages as counted: a trailing / dropped (docs/rollups.md, page normalisation)
        "top_pages": sorted(
            Counter(p.rstrip("/") or "/" for _, p, _ in rows).items(), key=lambda r: (-r[1], r[0])
        )[:10],
    }


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
        #: What the generated data holds (:func:`write_data`), for exact checks.
        self.known: dict[str, object] = {}

    def settings(self) -> Settings:
        return resolve(Settings.from_env({k: v for k, v in self.env.items() if k.startswith("PREAGG_")}))

    def caught_up(self, kind: str) -> None:
        settings = self.settings()
        asyncio.run(wait_caught_up(settings, [settings.topic(kind)], timeout=240))
        wait_ledgers_at_end(settings, settings.topic(kind))
        if kind == "hits" and settings.of(HITS).visits:  # and the visits stage, fed by it
            asyncio.run(wait_caught_up(settings, [settings.of(HITS).visits_topic], timeout=240))
            wait_ledgers_at_end(settings, settings.of(HITS).visits_topic)
        if kind == "hits":
            wait_sealed(settings)
            wait_counted(settings)

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

    def builtin(self, run: str) -> bool:
        """``export A=1 B=2`` and ``unset A B`` change the next lines' environment (True: done)."""
        if run.startswith("export "):
            for part in run.split()[1:]:
                name, value = part.split("=", 1)
                self.env[name] = value
            return True
        if run.startswith("unset "):
            for name in run.split()[1:]:
                self.env.pop(name, None)
            return True
        return False

    def do(self, run: str) -> str:
        """One line as a reader runs it: a job (``&``), a shell builtin, or a command that must print."""
        if self.builtin(run):
            return ""
        if run.endswith("&"):
            self.start(run.rstrip("&").strip())
            return ""
        out = self.run(run)
        if not SILENT.match(run):
            assert out.strip(), f"`{run}` printed nothing"
        self.after(run)
        return out

    def after(self, run: str) -> None:
        """Wait until what ``run`` sent is counted (a reader queries after the workers caught up)."""
        for kind in KINDS:
            if re.search(rf"preagg produce {kind}\b", run) or (
                kind == "hits" and "deadletters replay" in run
            ):
                self.caught_up(kind)

    def close(self) -> None:
        self.stop()
        subprocess.run(
            ["bash", "-c", "preagg services down"],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            timeout=120,
        )


@contextmanager
def walking(tmp_path: Path) -> Iterator[Walk]:
    """A fresh work directory with generated data at ``../shared/data`` (``walk.known``: its counts).

    At the end: jobs stopped, services down, and the transcript printed (shown when a test fails).
    """
    work = tmp_path / "work"
    work.mkdir()
    w = Walk(work)
    w.known = write_data(tmp_path / "shared")
    try:
        yield w
    finally:
        w.close()
        print("\n".join(w.transcript)[-20000:])
