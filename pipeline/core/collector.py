"""Python's cyclic garbage collector paused while a flush builds its updates and statements.

Why: a plan builds hundreds of thousands of long-lived objects (updates, their dicts, the
visitors' chunks) while the batch's aggregate holds millions more. Every 700 objects built
start a collection, and each tenth of those a wider one; once the objects built since the
last full collection pass a quarter of the heap, a full collection walks the whole heap. Planning
250,000 keyless hits with visitors took 7.4 s of CPU, 4.0 s with the collector paused (15 full
collections over the aggregate; py-spy put them on whatever line allocated next). A plan and
its statements form no reference cycles that must be freed meanwhile: reference counting
frees everything else as usual, and the collector runs again once the last pause ends.

At that end the objects built meanwhile are frozen (``gc.freeze``): the first young collection
after a pause walked every one of them (a plan's millions: 0.6 s of a 250,000-hit flush,
py-spy), though they are freed by reference counting when the commit ends. A committer thaws
them when its commit is over (:func:`thaw`): whatever of them is still alive then is walked
with the oldest generation, as any long-lived object is.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Objects allocated between two young collections (Python's default: 700). A worker holds
#: millions of long-lived objects in its batches; with the default, the young collections that
#: decide when to walk the whole heap came every 70,000 allocations, and commits between the
#: paused blocks spent seconds in full collections (py-spy: 9% of a keyless backlog's worker
#: samples on one tuple-renaming line of the commit). Cycles are still collected, later.
YOUNG = 50_000

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (nested and across threads: on again after the last
    block ends, unless it was off before the first)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.freeze()
                gc.enable()


def thaw() -> None:
    """The objects frozen at the end of pauses back in the collector's oldest generation."""
    gc.unfreeze()


def tune() -> None:
    """A worker's collector: young collections every :data:`YOUNG` allocations."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
