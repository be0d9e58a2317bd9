"""Seeded fault schedules (``make simulate``): schedules run, faults injected per kind, mismatches.

Each schedule gets a fresh topic, group and database on one pair of embedded services, and runs
:func:`pipeline.testing.simulate.run_schedule`: the store's answers played by the fault proxy
(rival inserts of new documents, answers lost after writes applied) while workers are killed,
crashed at commit points, added and stopped; then every counter and ledger is audited.

    python -m benchmarks.simulate --schedules 20 --seed 1 --out bench-results/simulate.json
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import drill_settings, embedded, write_results
from pipeline.testing.simulate import run_schedule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1, help="the first schedule's seed; the others follow it")
    ap.add_argument("--events", type=int, default=8_000)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds over which each stream is produced")
    ap.add_argument("--out", default="bench-results/simulate.json")
    args = ap.parse_args()
    faults: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    with embedded("preagg-simulate-") as (base, _):
        for seed in range(args.seed, args.seed + args.schedules):
            settings = drill_settings(base, f"schedule-{seed}", f"sim-{seed}")

            def say(message: str, seed: int = seed) -> None:
                print(f"  [schedule {seed} {time.strftime('%X')}] {message}", flush=True)

            report = run_schedule(settings, seed, args.events, args.duration, say=say)
            faults.update(report.faults)
            rows.append(
                {
                    "seed": seed,
                    "rates": asdict(report.rates),
                    "faults": dict(report.faults),
                    "mismatches": report.mismatches,
                    "seconds": round(report.chaos.seconds, 1),
                }
            )
            if report.mismatches:  # its workers' logs, kept beside the results to find why
                kept = Path(args.out).parent / "simulate-logs" / f"schedule-{seed}"
                shutil.copytree(Path(settings.home) / "logs", kept, dirs_exist_ok=True)
                print(f"schedule {seed}: its workers' logs are in {kept}", flush=True)
            print(
                f"schedule {seed}: faults {dict(report.faults)}, {len(report.mismatches)} mismatches, "
                f"{report.chaos.seconds:.0f}s",
                flush=True,
            )
    summary = {
        "schedules": len(rows),
        "faults": dict(faults),
        "mismatches": sum(len(r["mismatches"]) for r in rows),
        "seconds": round(time.monotonic() - began),
        "runs": rows,
    }
    out = write_results(summary, args.out)
    print(
        f"{summary['schedules']} schedules, faults injected {dict(faults)}, "
        f"{summary['mismatches']} mismatches; results in {out}"
    )
    if summary["mismatches"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
