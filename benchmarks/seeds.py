"""``make bench-seeds``: the seed's PostgreSQL + hll design and preagg on the same Last.fm listens.

PostgreSQL 15 and the ``hll`` extension come from Debian's packages (``apt-get``, as
root or through sudo, as ``make browser`` installs Chromium); the cluster is this
benchmark's own, in a temporary directory, on 127.0.0.1 and a free port, stopped at
the end. The PostgreSQL side runs in ``.venv-pg`` (psycopg; not a preagg dependency):
``benchmarks/seeds_pg.py``. The same listens (Last.fm 2K: user = userID, tag = tagID,
song = artistID, the day as the time) go through preagg on its embedded services.

Compared: ingest rate (the seed's upsert per listen with 1 and 4 clients, a
pre-aggregated statement per 1,000 listens, preagg end to end), top-10 tags of the
20 users with the most tags in their last week (p50/p99, and lists against the exact
answer, with a date check and the seed's query as written), bytes per (user, tag).

    python -m benchmarks.seeds --out bench-results/seeds.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import bson
import orjson

from benchmarks.common import (
    add_data_option,
    data_file,
    embedded,
    http_connection,
    latency_ms,
    side_venv,
    timed_request,
    use_data,
    write_results,
)
from pipeline.core.hll import Sketch
from pipeline.files import Accepted
from pipeline.kafka.producer import send_lines
from pipeline.kinds import named
from pipeline.kinds.listens.files import read_lastfm
from pipeline.kinds.listens.layout import listen_fields, top_fields
from pipeline.kinds.listens.query import read_from_slots, top_tags, window
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.worker.process import WorkerProcess

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
HLL_CONTROL = Path("/usr/share/postgresql/15/extension/hll.control")

Listen = tuple[int, int, int, date]


def ensure_postgres() -> None:
    """PostgreSQL 15 and its hll extension from Debian's packages, if missing."""
    if (PG_BIN / "initdb").exists() and HLL_CONTROL.exists():
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    packages = ["postgresql-15", "postgresql-15-hll"]
    done = subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *packages], env=env)
    if done.returncode != 0:
        subprocess.run([*sudo, "apt-get", "update", "-qq"], env=env, check=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *packages], env=env, check=True)


@contextmanager
def cluster() -> Iterator[str]:
    """A private PostgreSQL cluster on 127.0.0.1 (as the ``postgres`` user when run as root); its DSN."""
    home = Path(tempfile.mkdtemp(prefix="preagg-seeds-pg-"))
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(home, "postgres")
    data, port = home / "data", free_port()
    subprocess.run(
        [*as_user, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -k {home}"
    subprocess.run(
        [
            *as_user,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(home / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        subprocess.run(
            [*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True
        )
        shutil.rmtree(home, ignore_errors=True)


def lastfm_listens() -> tuple[list[Listen], list[tuple[bytes, bytes | None]]]:
    """Last.fm 2K as (user, tag, song, day) and as the events preagg is sent (same order)."""
    listens, events = [], []
    for rec in read_lastfm([str(data_file("lastfm-2k/user_taggedartists.dat"))]):
        if isinstance(rec, Accepted):
            e = orjson.loads(rec.raw)
            day = datetime.fromtimestamp(e["ts"], UTC).date()
            listens.append((int(e["user"]), int(e["tag"]), int(e["song"]), day))
            events.append((rec.raw, rec.key))
    return listens, events


def pick_users(listens: list[Listen], n: int = 20) -> list[dict[str, Any]]:
    """The ``n`` users with the most tags in the week ending on their latest day, and the exact top 10."""
    latest: dict[int, date] = {}
    for u, _, _, d in listens:
        latest[u] = max(latest.get(u, d), d)
    songs: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for u, t, v, d in listens:
        if latest[u] - timedelta(days=6) <= d:
            songs[u][t].add(v)
    users = sorted(songs, key=lambda u: (-len(songs[u]), u))[:n]
    out = []
    for u in users:
        exact = sorted(((t, len(s)) for t, s in songs[u].items()), key=lambda r: (-r[1], r[0]))
        out.append(
            {
                "user": u,
                "lo": str(latest[u] - timedelta(days=6)),
                "hi": str(latest[u]),
                "tags_in_window": len(songs[u]),
                "exact": {str(t): len(s) for t, s in songs[u].items()},
                "exact_top": exact[:10],
            }
        )
    return out


def agreement(users: list[dict[str, Any]], lists: dict[str, list[list[float]]]) -> dict[str, int]:
    """Lists whose every row is a true top-10 tag with its exact count; and such rows."""
    right_lists = right_rows = 0
    for u in users:
        got = lists.get(str(u["user"]), [])
        exact = u["exact"]
        tenth = u["exact_top"][-1][1] if u["exact_top"] else 0
        rows = sum(1 for tag, n in got if exact.get(str(int(tag))) == round(n) and round(n) >= tenth)
        right_rows += rows
        right_lists += rows == len(u["exact_top"]) == len(got)
    return {
        "lists_right": right_lists,
        "lists": len(users),
        "rows_right": right_rows,
        "rows": sum(len(u["exact_top"]) for u in users),
    }


def postgres_side(
    listens: list[Listen], users: list[dict[str, Any]], venv: Path, reps: int
) -> dict[str, Any]:
    ensure_postgres()
    python = side_venv(venv, ["psycopg[binary]>=3.2"], "psycopg")
    with tempfile.TemporaryDirectory() as tmp, cluster() as dsn:
        lpath, upath = Path(tmp) / "listens.tsv", Path(tmp) / "users.json"
        lpath.write_text("".join(f"{u} {t} {v} {d}\n" for u, t, v, d in listens))
        upath.write_text(json.dumps([{k: u[k] for k in ("user", "lo", "hi")} for u in users]))
        done = subprocess.run(
            [
                str(python),
                "-P",  # not benchmarks/ first on sys.path: its calendar.py would shadow the standard one
                str(REPO / "benchmarks" / "seeds_pg.py"),
                "--dsn",
                dsn,
                "--listens",
                str(lpath),
                "--users",
                str(upath),
                "--reps",
                str(reps),
                "--trials",
                json.dumps(trial_ranges()),
            ],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        sys.exit(f"the PostgreSQL side failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    for key in ("after_batched", "after_per_listen"):
        for name in ("dated", "as_written"):
            q = out[key][name]
            q.update(latency_ms(q.pop("times_ms"), digits=3), agreement=agreement(users, q.pop("lists")))
    out["estimation"] = errors_and_bytes(out["estimation"])
    return out


def preagg_side(
    events: list[tuple[bytes, bytes | None]], users: list[dict[str, Any]], reps: int
) -> dict[str, Any]:
    with embedded("preagg-seeds-") as (base, _):
        settings = named(base, "bench-seeds")
        topic = settings.topic("listens")
        asyncio.run(send_lines(settings, topic, events[:1]))
        worker = WorkerProcess(settings, "bench-seeds").start()
        try:
            asyncio.run(wait_caught_up(settings, [topic], timeout=120, poll=0.2))
            began = time.perf_counter()
            asyncio.run(send_lines(settings, topic, events[1:]))
            asyncio.run(wait_caught_up(settings, [topic], timeout=1800, poll=0.2))
            took = time.perf_counter() - began
        finally:
            worker.terminate()

        async def read() -> dict[str, Any]:
            client = mongo_client(settings.mongo_url or "")
            db = client[settings.db]
            f = listen_fields(settings.schema)
            try:
                sizes = [len(bson.encode(d)) async for d in db[f["collection"]].find()]
                tf = top_fields(settings.schema)
                summaries = [len(bson.encode(d)) async for d in db[tf["collection"]].find()]
                times, slot_times, lists = [], [], {}
                for _ in range(reps):
                    for u in users:
                        today = date.fromisoformat(u["hi"])
                        t = time.perf_counter()
                        got = await top_tags(db, u["user"], 7, 10, today, settings.schema)
                        times.append((time.perf_counter() - t) * 1000)
                        lists[str(u["user"])] = [[int(tag), n] for tag, n in got]
                        # The same answer from the user's (user, tag) documents (before the summary).
                        lo, hi = window(7, today)
                        t = time.perf_counter()
                        slots = await read_from_slots(db, u["user"], lo, hi, f)
                        slot_times.append((time.perf_counter() - t) * 1000)
                        assert sorted(slots, key=lambda r: (-r[1], r[0]))[:10] == got
            finally:
                await client.close()
            return {
                **latency_ms(times, digits=3),
                "from_the_slots": latency_ms(slot_times, digits=3),
                "agreement": agreement(users, lists),
                "documents": len(sizes),
                "document_bytes_mean": round(statistics.mean(sizes), 1),
                "summaries": len(summaries),
                # The users' top-tags summaries counted too: bytes per (user, tag), all stored.
                "bytes_per_pair": round((sum(sizes) + sum(summaries)) / len(sizes), 1),
            }

        http_ms = http_top_tags(settings, users, reps)
        rate = round((len(events) - 1) / took)
        return {"listens_per_s_end_to_end": rate, **asyncio.run(read()), "http": http_ms}


def http_top_tags(settings: Settings, users: list[dict[str, Any]], reps: int) -> dict[str, float]:
    """``/api/top-tags`` p50/p99 through ``preagg serve``, one kept-alive connection (a warming round)."""
    server = ServeProcess(settings).start()
    try:
        conn = http_connection(server.url)
        times = []
        for rep in range(reps + 1):
            for u in users:
                path = "/api/top-tags?" + urlencode({"user": u["user"], "days": 7, "today": u["hi"]})
                took, body = timed_request(conn, "GET", path)
                if not orjson.loads(body):
                    raise RuntimeError(f"{path}: no tags")
                if rep:
                    times.append(took)
        conn.close()
    finally:
        server.terminate()
    return latency_ms(times, digits=3)


#: Distinct songs per (user, tag) and trials, for the estimate's error and bytes.
SIZES = {100: 20, 1_000: 20, 10_000: 10, 100_000: 5, 1_000_000: 2}


def trial_ranges() -> dict[str, list[tuple[int, int]]]:
    """Per size in :data:`SIZES`, each trial's ids ``[first, last]``: the same sets for both sides."""
    return {
        str(n): [(b, b + n - 1) for b in (1_000_003 * (t + 1) * 7919 for t in range(trials))]
        for n, trials in SIZES.items()
    }


def errors_and_bytes(trials: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Per size: trials, mean and max relative error of the estimates, largest bytes."""
    out: dict[str, Any] = {}
    for n, rows in trials.items():
        errors = [abs(estimate - int(n)) / int(n) for estimate, _ in rows]
        out[n] = {
            "trials": len(rows),
            "mean_rel_error": round(statistics.mean(errors), 5),
            "max_rel_error": round(max(errors), 5),
            "bytes": int(max(size for _, size in rows)),
        }
    return out


def estimation() -> dict[str, Any]:
    """preagg's sketch (p = 12, 6-bit registers) on :func:`trial_ranges`."""
    out: dict[str, list[list[float]]] = {}
    for n, ranges in trial_ranges().items():
        out[n] = []
        for first, last in ranges:
            s = Sketch.empty()
            for x in range(first, last + 1):
                s.add(x)
            out[n].append([s.estimate(), len(s.encode())])
    return errors_and_bytes(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="top-10 queries per user")
    ap.add_argument("--pg-venv", type=Path, default=REPO / ".venv-pg")
    ap.add_argument("--out", default="bench-results/seeds.json")
    ap.add_argument(
        "--only",
        choices=("postgresql", "preagg"),
        help="one side (e.g. preagg alone, run from two worktrees in turn to compare two trees)",
    )
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)
    if not data_file("lastfm-2k/user_taggedartists.dat").exists():
        sys.exit(f"no Last.fm 2K under {data_file('')}: --data DIR")
    listens, events = lastfm_listens()
    users = pick_users(listens)
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "listens": len(listens),
        "pairs": len({(u, t) for u, t, _, _ in listens}),
        "users": [{k: u[k] for k in ("user", "lo", "hi", "tags_in_window")} for u in users],
    }
    if args.only != "preagg":
        print("PostgreSQL + hll, the seed's design ...", flush=True)
        results["postgresql"] = postgres_side(listens, users, args.pg_venv, args.reps)
        shown = {k: v for k, v in results["postgresql"].items() if not k.startswith("after")}
        print(json.dumps(shown), flush=True)
    if args.only != "postgresql":
        print("preagg ...", flush=True)
        results["preagg"] = preagg_side(events, users, args.reps)
        results["preagg"]["estimation"] = estimation()
        print(json.dumps(results["preagg"]), flush=True)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
