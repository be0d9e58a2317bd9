"""Chaos runs for several seeds (``make chaos``): faults survived and counter mismatches per seed.

Each seed gets a fresh topic, group and database on one pair of embedded services
and runs :func:`pipeline.testing.chaos.run_chaos`: 2–3 workers killed (``kill -9``),
crashed by injected faults inside and right after commits, scaled up and down
while a known stream is produced, then every stored counter is audited; even seeds count
visits too, and audit the sessions invariant (every site-day's visits, bounces, durations,
entries and exits against the rule applied to the events). Then the
drills of :mod:`pipeline.testing.drills`: the store down ``--outage`` seconds during a
scale-up (exits counted by status), and one poison event per 1,000.

    python -m benchmarks.chaos --seeds 1 2 3 4 5 --out bench-results/chaos.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import drill_settings, embedded, write_results
from pipeline.kinds import named
from pipeline.kinds.hits import KIND as HITS
from pipeline.services.embedded import EmbeddedServices
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings
from pipeline.testing.chaos import run_chaos
from pipeline.testing.drills import DrillReport, run_outage_rebalance, run_poison


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds over which the stream is produced")
    ap.add_argument("--out", default="bench-results/chaos.json")
    ap.add_argument(
        "--commit-max-docs",
        type=int,
        default=None,
        help="seal batches at this many documents (small: many sealed batches per flush under the faults)",
    )
    ap.add_argument(
        "--outage", type=float, default=90.0, help="seconds the store is down in the outage drill"
    )
    ap.add_argument("--drills", nargs="*", default=["outage", "poison"], choices=["outage", "poison"])
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    with embedded("preagg-chaos-") as (base, _):
        for seed in args.seeds:
            settings = drill_settings(base, f"seed-{seed}", f"chaos-{seed}")
            if args.commit_max_docs:
                settings = settings.with_(commit_max_docs=args.commit_max_docs)
            if seed % 2 == 0:
                settings = settings.with_stream(HITS, visits=True)
            began = time.strftime("%X")

            def say(message: str, seed: int = seed) -> None:
                print(f"  [seed {seed} {time.strftime('%X')}] {message}", flush=True)

            report = run_chaos(settings, seed, args.events, args.duration, say=say)
            # the truth the run audited against is keyed by (site, page, minute): not a result to keep
            row = {k: v for k, v in asdict(report).items() if k != "truth"}
            row |= {"faults": report.faults, "ok": report.ok, "started": began, "visits": seed % 2 == 0}
            runs.append(row)
            print(
                f"seed {seed}: {report.faults} faults (kill -9 {report.kills}, "
                f"injected {report.fault_exits}, fenced {report.fenced_exits}), "
                f"{report.scale_ups} scale-ups, {len(report.mismatches)} mismatches, {report.seconds:.0f}s",
                flush=True,
            )
    drills = [_drill_row(r) for r in _drills(args.drills, args.events, args.outage, args.seeds[0])]
    summary = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "drills": drills,
        "seeds": len(runs),
        "faults_survived": sum(r["faults"] for r in runs),
        "mismatching_runs": sum(1 for r in runs if not r["ok"]),
        "mismatches": sum(len(r["mismatches"]) for r in runs) + sum(len(d["mismatches"]) for d in drills),
        "runs": runs,
    }
    out = write_results(summary, args.out)
    print(
        f"{summary['seeds']} seeds, {summary['faults_survived']} faults survived, "
        f"{summary['mismatches']} mismatches; results in {out}"
    )


def _drills(names: list[str], events: int, outage: float, seed: int) -> list[DrillReport]:
    """The drills asked for, each on services of its own (the outage one keeps its data on disk)."""
    out = []
    for name in names:
        home = Path(tempfile.mkdtemp(prefix=f"preagg-drill-{name}-"))
        svc = EmbeddedServices(home, persistent=name == "outage")
        try:
            settings = named(
                for_embedded(
                    Settings(
                        home=home,
                        partitions=4,
                        flush_interval=0.5,
                        session_timeout=6.0,
                        rebalance_timeout=20.0,
                        max_pending_keys=2_000,
                    ),
                    svc.start(),
                ),
                f"drill-{name}",
            )

            def say(message: str, name: str = name) -> None:
                print(f"  [{name} {time.strftime('%X')}] {message}", flush=True)

            if name == "outage":
                report = run_outage_rebalance(settings, svc, seed, events, outage, say=say)
            else:
                report = run_poison(settings, seed, events, say=say)
        finally:
            svc.stop()
        print(
            f"drill {name}: exits {report.exits}, drains given up {report.drains_given_up}, "
            f"rebalance {report.rebalance_seconds}s during the outage, new member assigned "
            f"{report.rebalanced_after}s into it, poison {report.poison}, "
            f"{len(report.mismatches)} mismatches, {report.seconds:.0f}s",
            flush=True,
        )
        out.append(report)
    return out


def _drill_row(report: DrillReport) -> dict[str, Any]:
    row = asdict(report)
    row["exits"] = {str(k): v for k, v in report.exits.items()}
    row["ok"] = report.ok
    return row


if __name__ == "__main__":
    main()
