"""What a flusher is told: its policy (how it batches and retries) and its hooks (what it tells).

:class:`FlushPolicy` is the part of the settings a flusher reads (each field's trade-off is
stated in pipeline/settings.py, where the operator sets it); :class:`FlushHooks` are the
calls the worker and the kind plug in: a fault point for drills, what to do when fenced,
when a batch is sealed, a permanent error recorded, and a kind's steps before a plan and
after a commit. Unit tests leave the hooks they do not need at their defaults.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.commit import Forward
from pipeline.worker.exits import exit_fenced
from pipeline.worker.retry import OnStuck


@dataclass(frozen=True)
class FlushPolicy:
    """How one stream's flusher batches and retries (from ``Settings``)."""

    #: Items (distinct keys) in memory before consumption pauses (``PREAGG_MAX_PENDING_KEYS``).
    max_pending_keys: int
    #: Most ``$inc`` counters in one upsert; 0: never split (``PREAGG_MAX_FIELDS_PER_UPDATE``).
    max_fields_per_update: int = 0
    #: Longest pause, seconds, between two attempts of a failed store or broker call.
    max_backoff: float = 30.0
    #: Idempotent marked writes instead of transactions (honoured with an exactly-once sink only).
    marked: bool = False


def no_fault(point: str) -> None:
    """No fault injected (drills set one: pipeline/worker/faults.py)."""


def _nothing() -> None:
    """Nobody to tell."""


def ignored(writing: bool) -> None:
    """Nobody asked."""


@dataclass(frozen=True)
class FlushHooks:
    """Calls a flusher makes into the worker and its kind."""

    #: Fault points (``before-commit``, ``after-commit``) for the chaos drill.
    fault: Callable[[str], None] = no_fault
    #: A fence failed: another worker owns the partitions now (the default exits 75).
    on_fenced: Callable[[Exception], None] = exit_fenced
    #: A batch was sealed at the commit bound (the flush loop starts a flush).
    on_sealed: Callable[[], None] = _nothing
    #: Records (or clears) a permanent write error on the partitions' ledgers, for ``preagg status``.
    on_stuck: OnStuck | None = None
    #: A kind's step on each aggregate before its plan (hits: resolve name-store tokens), retried.
    before_plan: Callable[[Any], Awaitable[object]] | None = None
    before_plan_label: str = "before plan"
    #: Told each aggregate of a batch once it is committed (hits: seal top pages once settled).
    after_commit: Callable[[Any], None] | None = None
    #: Told when the flusher becomes busy (``True``: writing its batches, or catching up a
    #: backlog, whose commits follow each other) and when it no longer is (hits: the stored
    #: visitor numbers wait meanwhile).
    on_busy: Callable[[bool], None] = ignored
    #: A batch's aggregates by source partition → what its flush forwards to another stage once
    #: its intent is recorded (:class:`~pipeline.worker.forwarding.Forwarder`); idempotent writes.
    forward_of: Callable[[Mapping[int, Any], Mapping[int, int]], Forward | None] | None = None
