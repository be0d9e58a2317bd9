"""The wedge drill (``make drill-stop-together``): two workers stopped at once, then a third.

Each run, on its own topic, group and database of one pair of embedded services, runs
:func:`pipeline.testing.stop_together.stop_together` (SIGTERM or kill -9 to both at the same
instant) and prints its outcome; the counts of each outcome close the run. Before the
embedded broker's leader stopped sending LeaveGroup, 1 run in 2 wedged.

    python -m benchmarks.stop_together --runs 6 --how term --out bench-results/stop_together.json
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import asdict
from typing import Literal

from benchmarks.common import drill_settings, embedded, write_results
from pipeline.testing.stop_together import stop_together


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--how", choices=["term", "kill", "both"], default="both", help="the signal both get")
    ap.add_argument("--wait", type=float, default=180.0, help="seconds C gets to count the second stream")
    ap.add_argument("--out", default="bench-results/stop_together.json")
    args = ap.parse_args()
    rows = []
    with embedded("preagg-stop-together-", partitions=3) as (base, _):
        for i in range(args.runs):
            how: Literal["term", "kill"] = ("term", "kill")[i % 2] if args.how == "both" else args.how
            report = stop_together(
                drill_settings(base, f"run-{i}", f"st-{i}"), how, args.wait, seed=421 + 2 * i
            )
            row = asdict(report)
            row.pop("log_tail") if report.outcome == "recovered" else None
            rows.append(row)
            print(f"run {i}: {row}", flush=True)
    outcomes = Counter(f"{r['how']}: {r['outcome']}" for r in rows)
    print(dict(outcomes))
    write_results({"runs": rows, "outcomes": dict(outcomes)}, args.out)


if __name__ == "__main__":
    main()
