"""Forwarded records taken once (pipeline/core/forwarded.py): retries in any order, redone
flushes, zombies' late copies, and a restart from the saved state."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.forwarded import Forwarded


def _log(rng: random.Random, sizes: list[int]) -> list[tuple[int, int]]:
    """One destination partition's log of one source's flushes (seq, index): each flush's
    attempts land any subset in any order, the last one all; a zombie's copies of a flush
    land anywhere after the previous flush was whole, later flushes' records included."""
    log: list[tuple[int, int]] = []
    whole_at: list[int] = []  # where each flush's records were all in the log
    for seq, n in enumerate(sizes, start=1):
        whole_at.append(len(log))
        for _ in range(rng.randrange(3)):  # failed attempts: a part, any order, maybe twice
            part = [(seq, i) for i in range(n) if rng.random() < 0.5]
            log.extend(rng.sample(part, len(part)) + part[: rng.randrange(len(part) + 1)])
        everything = [(seq, i) for i in range(n)]
        log.extend(rng.sample(everything, n))
    for seq, n in reversed(list(enumerate(sizes, start=1))):  # later first: boundaries stay put
        for _ in range(rng.randrange(4)):  # a zombie's copies, late
            at = rng.randrange(whole_at[seq - 1], len(log) + 1)
            log[at:at] = [(seq, rng.randrange(n))] if n else []
    return log


@given(st.lists(st.integers(0, 12), min_size=1, max_size=8), st.integers(0, 10_000), st.integers(0, 400))
@settings(max_examples=500, deadline=None)
def test_every_record_is_taken_once(sizes: list[int], seed: int, cut: int) -> None:
    """Also across a restart at any point from :meth:`Forwarded.state`."""
    log = _log(random.Random(seed), sizes)
    f = Forwarded()
    taken = []
    cut = min(cut, len(log))
    for seq, i in log[:cut]:
        if f.take(("hits", 0), seq, i):
            taken.append((seq, i))
    f = Forwarded.restored(f.state())
    for seq, i in log[cut:]:
        if f.take(("hits", 0), seq, i):
            taken.append((seq, i))
    assert sorted(taken) == [(s, i) for s, n in enumerate(sizes, start=1) for i in range(n)]
    assert len(taken) == len(set(taken))


def test_sources_are_apart_and_copies_are_counted() -> None:
    f = Forwarded()
    assert f.take(("hits", 0), 1, 0) and f.take(("hits", 1), 1, 0)
    assert f.take(("hits", 0), 2, 0) and not f.take(("hits", 0), 1, 1)  # an older flush: a copy
    assert not f.take(("hits", 0), 2, 0) and f.copies == 2
