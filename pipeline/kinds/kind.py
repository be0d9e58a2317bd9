"""What a stream kind is: the small interface between one kind's folder and the rest of preagg.

A kind (``pipeline/kinds/<kind>/``) supplies its settings type, its ``schemas/<kind>/``
folder, a decoder, an aggregator factory (:class:`Stream`), the indexes its
documents need, how files become its events (``preagg produce``) and its query
subcommands. The worker, ``preagg setup``, the CLI, the settings and ``preagg
schema`` loop over the registered kinds (:mod:`pipeline.kinds`) and know nothing
else about them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol

from pipeline.core.aggregator import Aggregator
from pipeline.core.fields import FieldMode, Index, ShardKey, View, documents, hashed_id
from pipeline.core.ids import id_bytes
from pipeline.core.shippers import SHIPPERS
from pipeline.files import Record, read_jsonl
from pipeline.settings import S, Settings, SettingsError, kind_prefix

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from pymongo.asynchronous.database import AsyncDatabase

    from pipeline.core.cli_params import Commands, QueryCommand
    from pipeline.core.routes import Route
    from pipeline.core.visit_hits import VisitHit


class Decoder(Protocol):
    """One event line → its decoded fields (a tuple) or a :class:`Rejection`."""

    def decode(self, raw: bytes) -> Any: ...


@dataclass(frozen=True)
class Stream:
    """What one kind gives a worker's runtime."""

    #: A new, empty aggregator (one per batch).
    factory: Callable[[], Aggregator]
    #: Called with a batch's aggregator before its plan is built, inside the flusher's
    #: retry loop (hits: resolve custom-property names to name-store tokens).
    before_plan: Callable[[Any], Awaitable[object]] | None = None
    #: What :attr:`before_plan` does, for retry logs ("name store").
    before_plan_label: str = ""
    #: Prometheus metrics of the kind's own machinery (hits: name-store round trips).
    metrics: Callable[[], Iterable[Metric]] | None = None
    #: A task the worker runs beside the stream for its whole life, cancelled when it
    #: stops (hits: the periodic retention). It must log and bound its own failures.
    background: Callable[[], Awaitable[None]] | None = None
    #: Told each aggregate once its batch is committed (hits: the periods whose top pages
    #: to make exact once they settle). Must not block or raise.
    after_commit: Callable[[Any], None] | None = None
    #: Told when the stream becomes busy (``True``: writing a flush's commits, or catching up
    #: a backlog) and when it no longer is (hits: visitor numbers wait meanwhile). Must not
    #: block or raise.
    on_busy: Callable[[bool], None] | None = None
    #: How exactly-once flushes are written (docs/exactly-once.md). ``idempotent``: plain
    #: unordered bulk writes with per-document marks, any number of documents per flush,
    #: no transaction; for plans of ``$inc``, ``$bit or`` and ``$setOnInsert``.
    #: ``transaction``: one MongoDB transaction per batch (bounded in documents); needed
    #: by read-modify-write updates (``DocUpdate.compute``: listens' sketches).
    writes: Literal["idempotent", "transaction"] = "idempotent"
    #: A family of the kind's documents flushed over the same records on a schedule and a
    #: ledger of its own (pipeline/core/families.py; hits: the site rollups, ahead of the
    #: pages), with idempotent writes only. Its dead letters are this stream's.
    ahead: Stream | None = None
    #: The family's name in its ledgers and marks (named by the kind whenever ``ahead`` is).
    ahead_family: str = ""
    #: What an aggregate's flush forwards to :attr:`forward_topic` for another stage, once its
    #: intent is recorded (hits: identified hits, for visits; pipeline/core/visit_hits.py).
    #: With idempotent writes only.
    forwarded: Callable[[Any], list[VisitHit]] | None = None
    forward_topic: str = ""
    #: Each Kafka message is one record, never split into lines (a stage's binary messages).
    whole_messages: bool = False
    #: Seconds between this stream's flushes (``None``: the worker's ``PREAGG_FLUSH_INTERVAL``):
    #: a stage whose every flush costs in proportion to its state, not its input, flushes less.
    flush_interval: float | None = None
    #: Streams of other topics the kind's workers read, as ``(topic, stream)``: a stage fed by
    #: this one (hits: the visits stage, reading the forwarded hits). Each has a flusher of
    #: its own, named as its topic, and ledgers of its own.
    stages: tuple[tuple[str, Stream], ...] = ()
    #: Told, after each assignment, the partitions of the stream's topic the worker holds (the
    #: visits stage drops the state it kept of the others). Must not block or raise.
    keep: Callable[[set[int]], None] | None = None


@dataclass(frozen=True)
class StreamContext:
    """What a kind's :meth:`Kind.stream` may use: the deployment's settings and database."""

    settings: Settings
    mode: FieldMode
    db: AsyncDatabase[dict[str, Any]]
    #: "Now" for the decoders' lateness and future skew: the worker's
    #: :class:`~pipeline.core.clock.DecisionClock`, so that a redo decides as its flush did.
    clock: Callable[[], float] = time.time


class Kind(Generic[S]):
    """One stream kind: subclasses set the class attributes and implement ``decoder`` and ``stream``."""

    #: Kind name: metrics label, ``PREAGG_<NAME>_*`` prefix, default topic, CLI word.
    name: str
    #: The kind's settings dataclass (extends :class:`pipeline.settings.StreamSettings`).
    settings_type: type[S]
    #: ``schemas/<kind>/``: ``event.schema.json`` and ``fields.json``.
    folder: Path
    #: ``preagg produce <kind> --format``: the first is the default.
    formats: tuple[str, ...] = ("jsonl",)
    #: Readers of the formats other than ``jsonl`` that need no settings (a data set's own layout).
    readers: Mapping[str, Callable[[Iterable[str]], Iterator[Record]]] = MappingProxyType({})
    #: One line of help for ``preagg produce <kind>``.
    about: str = ""
    #: Bare log-line formats the kind's decoder reads besides JSON events (hits: ``clf``);
    #: ``PREAGG_<KIND>_FORMAT`` may name them, and shippers' envelopes may carry such lines.
    line_formats: tuple[str, ...] = ()
    #: Settings naming topics the kind writes (:meth:`topics`): a run named apart
    #: (:func:`pipeline.kinds.named`) names them apart too.
    topic_settings: tuple[str, ...] = ()

    def input_format(self, s: S) -> str:
        """The topic's input format (``PREAGG_<KIND>_FORMAT``), refused if the kind cannot read it."""
        fmt = s.format
        if fmt not in ("event", "auto", *SHIPPERS, *self.line_formats):
            raise SettingsError(
                f"{kind_prefix(self.name)}FORMAT={fmt}: {self.name} reads JSON events (event, auto, "
                f"{', '.join(SHIPPERS)}{''.join(', ' + f for f in self.line_formats)}), not {fmt} lines"
            )
        return fmt

    def decoder(self, settings: Settings, s: S) -> Decoder:
        """The decoder of one event line with the deployment's limits."""
        raise NotImplementedError

    def stream(self, ctx: StreamContext, s: S) -> Stream:
        """The aggregator factory (and extra steps) of one worker."""
        raise NotImplementedError

    def topics(self, s: S) -> list[str]:
        """Topics the kind writes besides dead letters (hits: forwarded hits), which ``preagg
        setup`` creates with its input topic (default: none)."""
        return []

    def indexes(self, mode: FieldMode) -> list[Index]:
        """Secondary indexes of the kind's collections (``_id`` needs none)."""
        return []

    def views(self, mode: FieldMode) -> list[View]:
        """The read-only views analysts query instead of the stored documents (docs/analysts.md)."""
        return []

    def collections(self) -> list[str]:
        """The collections the kind writes (``preagg setup`` creates them: never inside a transaction)."""
        return [spec["collection"] for spec in documents(self.folder).values()]

    def shard_keys(self, mode: FieldMode) -> list[ShardKey]:
        """Shard key per collection on a sharded cluster (default: hashed ``_id``, writes spread evenly)."""
        return [hashed_id(c) for c in self.collections()]

    def key(self, event: Any) -> bytes:
        """Partition key of a decoded event (default: its first field, the user)."""
        return id_bytes(event[0])

    def add_produce_options(self, parser: argparse.ArgumentParser) -> None:
        """Options of ``preagg produce <kind>`` beyond ``--format`` and ``--pack``."""

    def records(
        self, paths: Iterable[str], fmt: str, settings: Settings, s: S, args: argparse.Namespace
    ) -> Iterator[Record]:
        """The events of input files in format ``fmt`` (one of :attr:`formats`)."""
        if fmt in self.readers:
            return self.readers[fmt](paths)
        if fmt != "jsonl":
            raise ValueError(f"{self.name}: unknown format {fmt!r}")
        # Files hold events whatever the topic's format (``--as`` says how they are sent).
        return read_jsonl(
            paths, self.decoder(settings, replace(s, format="event", lateness=0.0)).decode, self.key
        )

    def query_commands(self) -> Sequence[QueryCommand]:
        """The kind's ``preagg query`` subcommands: each a declared query (the same as its
        endpoint's, :mod:`pipeline.core.queries`) and the function that runs it."""
        return ()

    def add_commands(self, commands: Commands) -> None:
        """The kind's own top-level ``preagg`` commands (hits: ``sites``, ``retention``);
        each parser sets ``func``."""

    def api_routes(self, settings: Settings) -> list[Route]:
        """The kind's read-only endpoints of ``preagg serve``: its queries over HTTP (default: none)."""
        return []

    async def prepare(self, db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> list[str]:
        """What ``preagg setup`` derives from stored documents before workers run (listens:
        the per-user top-tags summaries of documents written before them); lines saying what
        was done. Idempotent."""
        return []

    async def unprepared(self, db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> list[str]:
        """What :meth:`prepare` has still to do: a worker refuses to start until it is done."""
        return []

    async def status_notes(self, db: AsyncDatabase[dict[str, Any]], settings: Settings) -> list[str]:
        """Lines ``preagg status`` adds for this kind (hits: days with pages past the cap)."""
        return []
