"""Families of documents flushed apart over the same records: their own ledgers and marks (pure).

A kind may split its documents into families whose flushes run on schedules of their own
(hits: the site rollups a live chart reads, a handful of documents, ahead of the pages'
tens of thousands; docs/design.md, "Site rollups ahead of pages"). Each family keeps, per
partition, a position of its own and marks of its own, so that each is exactly once on its
own whatever the other does: a family's flushes name the partition ``<topic>@<family>``
(``@`` cannot appear in a Kafka topic name), which gives it its own ledger document
(``<group>|<topic>@<family>|<partition>``) and its own mark in every document it writes
(``_a.<topic>@<family>|<partition>``). :class:`FamilySink` does the renaming between a
flusher, which speaks of Kafka's partitions, and the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from pipeline.core.commit import TP, Committed, Failure, Fence, Forward, Ledgers, LedgerView, Sink
from pipeline.core.updates import DocUpdate

#: Between a topic and its family in a family's partition names.
AT = "@"


def family_topic(topic: str, family: str) -> str:
    """The name a family's ledger and marks give ``topic``."""
    return f"{topic}{AT}{family}"


def base_topic(name: str) -> str:
    """The Kafka topic of a ledger's or a mark's topic name (itself when it names no family)."""
    return name.split(AT, 1)[0]


def family_of(name: str) -> str | None:
    """The family a ledger's or a mark's topic name names (``None``: the kind's main documents)."""
    _, sep, family = name.partition(AT)
    return family if sep else None


class StuckSink(Sink, Protocol):
    """A sink that records a partition's permanent write error (what a flusher's retrier reports)
    and reads one partition's ledger (the guard's checks)."""

    async def note_stuck(self, tps: Sequence[TP], reason: str | None) -> None: ...

    async def ledger(self, tp: TP) -> LedgerView | None: ...


class FamilySink:
    """A sink seen by one family's flusher: its partitions renamed to the family's on the way in.

    ``family=None``: the kind's main flusher, whose ledgers keep their names and record the
    ``families`` flushed apart from them."""

    def __init__(self, sink: StuckSink, family: str | None, families: tuple[str, ...] = ()) -> None:
        self.sink, self.family, self.families = sink, family, families
        self._suffix = "" if family is None else AT + family

    def tp(self, tp: TP) -> TP:
        """The family's name of a Kafka partition."""
        if self.family is None or tp[0].endswith(self._suffix):
            return tp
        return (tp[0] + self._suffix, tp[1])

    def _fences(self, fences: Sequence[Fence]) -> list[Fence]:
        adopt = self.family is not None
        return [
            replace(f, topic=self.tp((f.topic, f.partition))[0], adopt=adopt, families=self.families)
            for f in fences
        ]

    def _rename(self, u: DocUpdate) -> None:
        # In place and idempotent: a retried commit hands the same updates again.
        u.sources = tuple(self.tp(tp) for tp in u.sources)
        for share in u.shares:
            self._rename(share)

    @property
    def exactly_once(self) -> bool:
        return self.sink.exactly_once

    def failure(self, exc: BaseException) -> Failure:
        return self.sink.failure(exc)

    async def ledgers(self, tps: Sequence[TP]) -> Ledgers:
        """The family's ledgers. A partition without one whose main ledger does not record the
        family (written before the family was flushed apart) starts where the main ledger's
        counting ends: its ``next``, or the end of the flush it records as cut short, which its
        redo writes whole; everything below was counted by flushes that wrote every document.
        One whose main ledger records the family has never committed: it starts with Kafka's
        committed offset, which stays below what the family has not committed."""
        names = {self.tp(tp): tp for tp in tps}
        found = await self.sink.ledgers(list(names))
        positions = {names[tp]: n for tp, n in found.positions.items()}
        pending = {names[tp]: p for tp, p in found.pending.items()}
        if self.family is None:
            return Ledgers(positions, pending)
        missing = [tp for tp in tps if positions.get(tp) is None and tp not in pending]
        recorded = await asyncio.gather(*(self._recorded(tp) for tp in missing))  # at once, not in turn
        older = [tp for tp, known in zip(missing, recorded, strict=True) if not known]
        if older:
            main = await self.sink.ledgers(older)
            for tp in older:
                cut = main.pending.get(tp)
                positions[tp] = cut.end if cut is not None else main.positions.get(tp)
        return Ledgers(positions, pending)

    async def _recorded(self, tp: TP) -> bool:
        """Whether the main ledger of ``tp`` is absent or records this family."""
        main = await self.sink.ledger(tp)
        return main is None or self.family in main.families

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
        forward: Forward | None = None,
    ) -> Committed:
        for u in updates:
            self._rename(u)
        return await self.sink.commit(updates, self._fences(fences), flush_id, token, marked, forward=forward)

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        return await self.sink.outcome(self._fences(fences), flush_id)

    async def note_stuck(self, tps: Sequence[TP], reason: str | None) -> None:
        await self.sink.note_stuck([self.tp(tp) for tp in tps], reason)

    async def ledger(self, tp: TP) -> LedgerView | None:
        """The family's ledger of a Kafka partition (``None``: none stored)."""
        return await self.sink.ledger(self.tp(tp))
