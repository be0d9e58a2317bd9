"""The seed's PostgreSQL design (``postgresql-hll-recommendation.txt``) on the same listens as preagg.

Run by ``benchmarks.seeds`` with its own interpreter (``.venv-pg``: psycopg, not a
preagg dependency) against a PostgreSQL 15 cluster with the ``hll`` extension. It
reads the listens (``uid tagid vid YYYY-MM-DD`` lines) and the queries to time,
and prints one JSON object:

* the seed's schema (``w1..w7`` weekday slots with their times, ``whole``) and its
  upsert per listen, on event time (the seed writes ``now()``; a replay of history
  needs the listen's day): listens/s with 1 and 4 clients;
* a pre-aggregated variant: 1,000 listens a statement, grouped per (uid, tagid)
  with ``hll_add_agg``, each slot keeping its latest day (the rule preagg uses);
* top-10 tags per user, with a date check (slots dated within the window) and the
  seed's query as written (every slot, whatever its date): p50/p99 and the lists;
* bytes per (uid, tagid) row;
* pg-hll's estimate and bytes for the id ranges it is given.

It measures only: ``benchmarks.seeds`` turns times and trials into figures, the same
way for both sides.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import date
from typing import Any

import psycopg

SCHEMA = (
    "drop table if exists t_like",
    "create extension if not exists hll",
    "create table t_like (uid int, tagid int, "
    + ", ".join(f"w{i} hll, w{i}_mod_time timestamp" for i in range(1, 8))
    + ", whole hll, primary key (uid, tagid))",
)


def per_listen_sql(slot: int) -> str:
    """The seed's upsert of one listen into slot ``slot`` (its weekday), as written, on event time."""
    w = f"w{slot}"
    return (
        f"insert into t_like (uid, tagid, {w}, {w}_mod_time, whole) "
        "values (%s, %s, hll_hash_integer(%s) || hll_empty(), %s, hll_hash_integer(%s) || hll_empty()) "
        f"on conflict (uid, tagid) do update set {w} = case "
        f"when date(t_like.{w}_mod_time) <> date(excluded.{w}_mod_time) then excluded.{w} "
        f"else hll_union(coalesce(t_like.{w}, hll_empty()), excluded.{w}) end, "
        f"{w}_mod_time = excluded.{w}_mod_time, "
        "whole = hll_union(coalesce(t_like.whole, hll_empty()), excluded.whole) "
        f"where hll_union(coalesce(t_like.{w}, hll_empty()), excluded.{w}) "
        f"<> coalesce(t_like.{w}, hll_empty()) "
        "or hll_union(coalesce(t_like.whole, hll_empty()), excluded.whole) "
        "<> coalesce(t_like.whole, hll_empty())"
    )


BATCH_SQL = (
    "with l as (select u.uid, u.tagid, u.vid, u.d, extract(isodow from u.d)::int as wd "
    "  from unnest(%s::int[], %s::int[], %s::int[], %s::date[]) as u(uid, tagid, vid, d)), "
    "latest as (select uid, tagid, wd, max(d) as d from l group by 1, 2, 3), "
    "g as (select l.uid, l.tagid, hll_add_agg(hll_hash_integer(l.vid)) as whole, "
    + ", ".join(
        f"hll_add_agg(hll_hash_integer(l.vid)) filter (where l.wd = {i} and l.d = latest.d) as w{i}, "
        f"max(l.d) filter (where l.wd = {i}) as w{i}_mod_time"
        for i in range(1, 8)
    )
    + " from l join latest using (uid, tagid, wd) group by l.uid, l.tagid) "
    "insert into t_like (uid, tagid, whole, "
    + ", ".join(f"w{i}, w{i}_mod_time" for i in range(1, 8))
    + ") select uid, tagid, whole, "
    + ", ".join(f"w{i}, w{i}_mod_time" for i in range(1, 8))
    + " from g on conflict (uid, tagid) do update set "
    + ", ".join(
        f"w{i} = case when excluded.w{i}_mod_time is null then t_like.w{i} "
        f"when t_like.w{i}_mod_time is null or t_like.w{i}_mod_time < excluded.w{i}_mod_time "
        f"then excluded.w{i} "
        f"when t_like.w{i}_mod_time = excluded.w{i}_mod_time then hll_union(t_like.w{i}, excluded.w{i}) "
        f"else t_like.w{i} end, "
        f"w{i}_mod_time = greatest(t_like.w{i}_mod_time, excluded.w{i}_mod_time)"
        for i in range(1, 8)
    )
    + ", whole = hll_union(coalesce(t_like.whole, hll_empty()), excluded.whole)"
)

#: Top 10 with a date check: only slots dated within [lo, hi] count.
TOP_DATED = (
    "select tagid, hll_cardinality("
    + " || ".join(
        f"coalesce(case when w{i}_mod_time::date between %(lo)s and %(hi)s then w{i} end, hll_empty())"
        for i in range(1, 8)
    )
    + ") as n from t_like where uid = %(uid)s order by n desc, tagid limit 10"
)
#: The seed's query as written: every slot, whatever its date.
TOP_AS_WRITTEN = (
    "select tagid, hll_cardinality("
    + " || ".join(f"coalesce(w{i}, hll_empty())" for i in range(1, 8))
    + ") as n from t_like where uid = %(uid)s order by n desc, tagid limit 10"
)

Listen = tuple[int, int, int, date]


def read_listens(path: str) -> list[Listen]:
    out = []
    with open(path) as f:
        for line in f:
            u, t, v, d = line.split()
            out.append((int(u), int(t), int(v), date.fromisoformat(d)))
    return out


def reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in SCHEMA:
            conn.execute(stmt)


def per_listen(dsn: str, listens: list[Listen], clients: int) -> float:
    """Listens/s of the seed's upsert, one listen a statement, ``clients`` connections (users split)."""
    reset(dsn)
    shares = [[x for x in listens if x[0] % clients == c] for c in range(clients)]
    sqls = {slot: per_listen_sql(slot) for slot in range(1, 8)}

    def work(share: list[Listen]) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for uid, tag, vid, d in share:
                conn.execute(sqls[d.isoweekday()], (uid, tag, vid, d, vid), prepare=True)

    began = time.perf_counter()
    threads = [threading.Thread(target=work, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(listens) / (time.perf_counter() - began)


def batched(dsn: str, listens: list[Listen], size: int = 1000) -> float:
    """Listens/s of the pre-aggregated variant: ``size`` listens a statement, one client."""
    reset(dsn)
    began = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(0, len(listens), size):
            chunk = listens[i : i + size]
            conn.execute(
                BATCH_SQL,
                ([x[0] for x in chunk], [x[1] for x in chunk], [x[2] for x in chunk], [x[3] for x in chunk]),
            )
    return len(listens) / (time.perf_counter() - began)


def queries(dsn: str, users: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    """Top-10 lists and latency, with the date check and as written."""
    out: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, sql in (("dated", TOP_DATED), ("as_written", TOP_AS_WRITTEN)):
            lists = {}
            times = []
            for _ in range(reps):
                for u in users:
                    args = {
                        "uid": u["user"],
                        "lo": date.fromisoformat(u["lo"]),
                        "hi": date.fromisoformat(u["hi"]),
                    }
                    t = time.perf_counter()
                    rows = conn.execute(sql, args, prepare=True).fetchall()
                    times.append((time.perf_counter() - t) * 1000)
                    lists[str(u["user"])] = [[int(tag), float(n)] for tag, n in rows]
            out[name] = {"times_ms": times, "lists": lists}
        size = conn.execute("select avg(pg_column_size(t.*)), count(*) from t_like t").fetchone()
        total = conn.execute("select pg_total_relation_size('t_like')").fetchone()
        assert size is not None and total is not None
        out["row_bytes_mean"] = round(float(size[0]), 1)
        out["rows"] = int(size[1])
        out["relation_bytes_per_row"] = round(int(total[0]) / max(1, int(size[1])), 1)
    return out


def estimation(dsn: str, trials: dict[str, list[tuple[int, int]]]) -> dict[str, list[list[float]]]:
    """pg-hll's defaults (log2m 11, 5-bit registers): estimate and bytes of each trial's id range.

    ``trials``: per size, the ``[first, last]`` ids of each trial; ``benchmarks.seeds``
    chose them and sums the errors up, for both sides alike.
    """
    out: dict[str, list[list[float]]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension if not exists hll")
        for n, ranges in trials.items():
            out[n] = []
            for first, last in ranges:
                row = conn.execute(
                    "select hll_cardinality(h), pg_column_size(h) from "
                    "(select hll_add_agg(hll_hash_bigint(g)) as h "
                    "from generate_series(%s::bigint, %s::bigint) g) x",
                    (first, last),
                ).fetchone()
                assert row is not None
                out[n].append([float(row[0]), int(row[1])])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--listens", required=True)
    ap.add_argument("--users", required=True, help="JSON: [{user, lo, hi}, ...]")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--trials", default="{}", help='JSON: {"distinct songs": [[first id, last id], ...]}')
    args = ap.parse_args()
    listens = read_listens(args.listens)
    users = json.loads(open(args.users).read())
    result: dict[str, Any] = {
        "listens": len(listens),
        "estimation": estimation(args.dsn, json.loads(args.trials)),
    }
    result["per_listen_4_clients_per_s"] = round(per_listen(args.dsn, listens, 4))
    result["batched_1000_per_s"] = round(batched(args.dsn, listens))
    result["after_batched"] = queries(args.dsn, users, args.reps)
    result["per_listen_1_client_per_s"] = round(per_listen(args.dsn, listens, 1))
    result["after_per_listen"] = queries(args.dsn, users, args.reps)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
