"""What ``preagg retention run`` says of the workers' periodic runs (pure)."""

from __future__ import annotations

from pipeline.kinds.hits.sites.commands import periodic_text

T = 1_795_000_000.0  # 2026-11-18T...Z


def test_the_periodic_line_says_interval_last_run_and_one_under_way() -> None:
    assert (
        periodic_text(0, {})
        == "workers' periodic retention: off (PREAGG_HITS_RETENTION_EVERY=0); none run yet"
    )
    assert periodic_text(24, {}).endswith("every 24 h; none run yet")
    last = {"started": T, "finished": T + 7, "by": "w1", "pruned": {"minute counters older than 30 days": 5}}
    done = periodic_text(24, {"started": T, "by": "w1", "last": last})
    assert "last run 2026-11-18" in done and "by w1, 7 s, minute counters older than 30 days: 5" in done
    assert "under way" not in done
    busy = periodic_text(24, {"started": T + 86400, "by": "w2", "last": last})
    assert busy.endswith("; one started by w2 is under way or was cut short")
    assert "under way" in periodic_text(24, {"started": T, "by": "w3"})
