"""Partition checks for unit tests: each left out is a pass (the guard's role, without servers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pipeline.core.incarnation import Verdict

TP = tuple[str, int]


@dataclass
class Checks:
    """:class:`pipeline.worker.gate.PartitionChecks` from the callables a test gives."""

    check_fn: Callable[[TP], Awaitable[Verdict]] | None = None
    on_diverged_fn: Callable[[TP, Verdict], Awaitable[None]] | None = None
    on_gap_fn: Callable[[TP, int, int], Awaitable[None]] | None = None

    async def check(self, tp: TP) -> Verdict:
        return await self.check_fn(tp) if self.check_fn else Verdict("same", "")

    async def on_diverged(self, tp: TP, verdict: Verdict) -> None:
        if self.on_diverged_fn:
            await self.on_diverged_fn(tp, verdict)

    async def on_gap(self, tp: TP, stored: int, first: int) -> None:
        if self.on_gap_fn:
            await self.on_gap_fn(tp, stored, first)
