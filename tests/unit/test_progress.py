"""A worker's progress line: what it counted since the last one, or nothing when nothing happened (pure)."""

from __future__ import annotations

import logging

from pipeline.core.logs import EACH_FLUSH, configure
from pipeline.worker.progress import Tally, progress_line


def test_a_minute_of_counting_is_one_line() -> None:
    before = {"hits": Tally(1_000, 2, 10, 500), "listens": Tally(0, 0, 0, 0)}
    now = {"hits": Tally(13_000, 5, 70, 4_500), "listens": Tally(600, 0, 60, 40)}
    line = progress_line(before, now, 60.0)
    assert line == (
        "progress: 12,600 events counted in the last 60 s (210/s: hits 12,000, listens 600), "
        "3 dead-lettered, 120 flushes, 4,040 documents written"
    )


def test_nothing_happened_nothing_said() -> None:
    same = {"hits": Tally(5, 0, 1, 3)}
    assert progress_line(same, same, 60.0) is None


def test_a_stream_seen_for_the_first_time_counts_from_zero() -> None:
    assert progress_line({}, {"hits": Tally(7, 0, 1, 2)}, 30.0) == (
        "progress: 7 events counted in the last 30 s (0/s: hits 7), 0 dead-lettered, 1 flushes, "
        "2 documents written"
    )


def test_the_line_per_flush_is_shown_only_when_asked() -> None:
    root = logging.getLogger("test-progress-root")
    each = logging.getLogger(EACH_FLUSH)
    configure(root, logging.INFO, "text")
    assert each.level == logging.WARNING
    configure(root, logging.INFO, "text", each_flush=True)
    assert each.level == logging.NOTSET  # the worker's level: INFO
    configure(root, logging.DEBUG, "text")
    assert each.level == logging.NOTSET
    configure(root, logging.INFO, "text")  # as a worker leaves it
