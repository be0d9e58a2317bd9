"""Faust's Kafka consumer, reading committed records only and delivering them in batches.

**read_committed.** Faust reads ``read_committed`` only when it runs Kafka
transactions itself (``processing_guarantee="exactly_once"``, which the embedded
broker lacks, and which our exactly-once does not use: MongoDB's transaction is the
commit). Records of aborted transactions from other producers (Kafka Streams, Flink,
Connect, Debezium) must never be counted, so the worker's consumer is switched to
``read_committed`` here; aiokafka applies it to every fetch.

**Batches.** Faust hands every record to its agent one at a time: a task pair per
record (``Service.wait_first``), the conductor's lock, an ``Event``, a queue hop and
the stream's iteration, about 150-250 us a message. That is nothing with packed
messages and everything with one event per message (4.7k events/s measured). For
the topics that have a :data:`BatchHandler`, :meth:`WorkerConsumer._drain_messages`
keeps what Faust's consumer loop does per record that matters (read offsets, offset
gaps for its commit, the generation and flow checks of a rebalance, the set of
unacked messages that shutdown and rebalance wait for) and hands the aiokafka records
of one fetch and partition to the handler as one list, without making a Faust
``Message`` of each. Commits, the consumer group and rebalances stay Faust's: the
records are acked with :meth:`WorkerConsumer.ack_records` once MongoDB committed
them, which keeps the bookkeeping ``Consumer.ack`` keeps (acked offsets per
partition, from which Faust computes the offset it commits).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from time import monotonic
from typing import Any, TypeAlias

import aiokafka
from aiokafka.structs import ConsumerRecord
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, AppT, Message
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from pipeline.worker.refused import RefusedCommits

log = logging.getLogger("preagg.worker")

Record: TypeAlias = ConsumerRecord[bytes, bytes]
#: Takes the records of one partition from one fetch, in offset order.
BatchHandler = Callable[[TP, Sequence[Record]], Awaitable[None]]
#: The next offset the handler's side has taken of a partition (``None``: nothing yet).
Taken = Callable[[TP], int | None]

_HANDLERS: weakref.WeakKeyDictionary[AppT, dict[str, tuple[BatchHandler, Taken]]] = (
    weakref.WeakKeyDictionary()
)


def deliver_batches(app: AppT, topic: str, handler: BatchHandler, taken: Taken) -> None:
    """Make ``app``'s consumer hand ``topic``'s records to ``handler`` in lists (see module doc).

    ``taken`` tells how far a handler interrupted mid-list (a stop while it waited for
    a flush) got, so that shutdown waits for exactly the records it took.
    """
    _HANDLERS.setdefault(app, {})[topic] = (handler, taken)


def batch_handlers(app: AppT) -> Mapping[str, tuple[BatchHandler, Taken]]:
    """The batch handlers registered for ``app``, by topic."""
    return _HANDLERS.get(app, {})


def _named(tps: Iterable[TP], offsets: Mapping[TP, int]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{offsets[tp]}" for tp in tps)


class ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread with an aiokafka consumer in ``read_committed`` mode."""

    #: ``fetch_max_wait_ms`` of the aiokafka consumer (``None``: Faust's 1500 ms). The
    #: embedded broker holds every fetch of a worker for this long once a partition runs
    #: dry (measured: one partition's backlog read 14k records per 1.3 s), where Kafka
    #: answers as soon as any data is there; :func:`install` lowers it for Tansu only.
    fetch_max_wait_ms: int | None = None

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka keeps both until start() builds its fetcher with them.
        consumer._isolation_level = "read_committed"
        if self.fetch_max_wait_ms is not None:
            consumer._fetch_max_wait_ms = self.fetch_max_wait_ms
        return consumer


class WorkerConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer: :class:`ReadCommittedThread`, batch delivery to handlers."""

    #: Per partition and offset, the message that stands in Faust's unacked set for a list.
    _standing: dict[tuple[str, int, int], Message]

    #: Offset commits Kafka refused, asked for again at the next commit (:mod:`~pipeline.worker.refused`).
    refused_commits: RefusedCommits[TP]

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        self._standing = {}
        self.refused_commits = RefusedCommits()
        return ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

    def _filter_committable_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Faust's offsets to commit, and those Kafka refused before for partitions still held."""
        offsets: dict[TP, int] = super()._filter_committable_offsets(tps)
        if self.refused_commits.offsets:
            offsets = self.refused_commits.with_refused(offsets, self.assignment())
        return offsets

    async def _commit_offsets(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        """Faust's commit; when Kafka refuses it, Faust's committed offsets put back and the refusal kept."""
        before = {tp: self._committed_offset[tp] for tp in offsets}
        did: bool = await super()._commit_offsets(offsets, start_new_transaction=start_new_transaction)
        if did:
            ended = self.refused_commits.committed(offsets)
            if ended:
                log.info("Kafka took the offset commit it had refused: %s", _named(ended, offsets))
            return did
        held = self.refused_commits.refused(offsets, self.assignment())
        for tp in held:  # Faust recorded them as committed: they were not
            self._committed_offset[tp] = before[tp]
        if held:
            log.warning(
                "Kafka refused the offset commit of %s (a rebalance); asked again at the next commit",
                _named(held, offsets),
            )
        return did

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await super().on_partitions_revoked(revoked)
        self.refused_commits.revoked(revoked)

    def ack_records(self, records: Sequence[Record]) -> None:
        """Ack delivered records, as ``Consumer.ack`` acks messages: Faust commits up to them."""
        standing = self._standing
        acks_enabled_for = self.app.topics.acks_enabled_for
        tps: dict[tuple[str, int], TP] = {}
        with ack_lock:
            n = 0
            for rec in records:
                key = (rec.topic, rec.partition)
                tp = tps.get(key)
                if tp is None:
                    tp = tps[key] = self._new_topicpartition(rec.topic, rec.partition)
                offset = rec.offset
                stand_in = standing.pop((rec.topic, rec.partition, offset), None)
                if stand_in is not None:
                    stand_in.acked = True
                    self._unacked_messages.discard(stand_in)
                if not acks_enabled_for(rec.topic):
                    continue
                committed = self._committed_offset[tp]
                acked_index = self._acked_index[tp]
                if (committed is None or offset >= committed) and offset not in acked_index:
                    acked_index.add(offset)
                    self._acked[tp].append(offset)
                    n += 1
            self._n_acked += n
            notify(self._waiting_for_ack)

    def abandon_unacked(self) -> int:
        """Stop waiting for the delivered lists not acked yet (their batches were dropped).

        Nothing is acked: Faust commits only what was, and after the rebalance it seeks
        every assigned partition back to its committed offset, so the records are read
        again (:meth:`pipeline.worker.flusher.Flusher.abandon`). Returns the lists dropped.
        """
        with ack_lock:
            dropped = len(self._standing)
            for stand_in in self._standing.values():
                self._unacked_messages.discard(stand_in)
            self._standing.clear()
            notify(self._waiting_for_ack)
        return dropped

    def release(self, topic: str, partition: int, start: int) -> int:
        """Stop waiting for the delivered lists of a partition from ``start`` on: a reader let
        go of them, unacked, and the partition is read again from its committed offset after
        the rebalance (:mod:`pipeline.worker.letgo`). Returns the lists released."""
        with ack_lock:
            gone = [k for k in self._standing if k[0] == topic and k[1] == partition and k[2] >= start]
            for key in gone:
                self._unacked_messages.discard(self._standing.pop(key))
            notify(self._waiting_for_ack)
        return len(gone)

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - needs a broker
        """Faust's fetch loop (``Consumer._drain_messages``), one handler call per partition and fetch."""
        handlers = batch_handlers(self.app)
        if not handlers:
            await super()._drain_messages(fetcher)
            return
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await asyncio.sleep(0)
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:
                    # As Faust's getmany: records fetched while a rebalance stops the flow are
                    # dropped and the partitions sought back to their committed offsets.
                    try:
                        await self.perform_seek()
                    except Exception as exc:  # Faust logs and goes on, and so do we
                        self.log.warning("exception performing seek when flow not active %r", exc)
                    continue
                await self._deliver(records, active, handlers)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    def _stand_for(self, tp: TP, rec: Record) -> None:
        stand_in = self._to_message(tp, rec)
        self._standing[(rec.topic, rec.partition, rec.offset)] = stand_in
        self._unacked_messages.add(stand_in)

    def _unstand(self, rec: Record) -> None:
        stand_in = self._standing.pop((rec.topic, rec.partition, rec.offset), None)
        if stand_in is not None:
            self._unacked_messages.discard(stand_in)

    async def _deliver(
        self,
        records: Mapping[TP, list[Any]],
        active: set[TP] | None,
        handlers: Mapping[str, tuple[BatchHandler, Taken]],
    ) -> None:
        """Hand one fetch's records to the handlers, partition by partition."""
        generation = self.app.consumer_generation_id
        acks_enabled_for = self.app.topics.acks_enabled_for
        for tp, recs in records.items():
            if not self.flow_active or self.app.consumer_generation_id != generation:
                return  # a rebalance began: what was not delivered is fetched again after it
            if active is not None and tp not in active and tp not in self._buffered_partitions:
                continue
            self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            read = self._read_offset[tp]
            messages: list[Record] = []
            for rec in recs:
                offset = rec.offset
                if read is not None and offset < read:
                    continue  # delivered before (Faust drops these too)
                if read and offset - read > 1 and acks_enabled_for(tp.topic):
                    # Offsets Kafka skipped (transaction markers, compaction): Faust's commit must
                    # step over them.
                    await self._add_gap(tp, read + 1, offset)
                read = offset
                messages.append(rec)
            if not messages:
                continue
            registered = handlers.get(tp.topic)
            if registered is None:
                for rec in messages:
                    await self.wait_first(self.callback(self._to_message(tp, rec)), self.suspend_flow.wait())
            else:
                handler, taken = registered
                # Faust's livelock watch (verify_event_path) reads when a stream last took an
                # event; without this it logs "Stream has not started processing" every few
                # seconds for partitions whose records never pass through a Faust stream.
                self.app.monitor.stream_inbound_time[tp] = monotonic()
                # Rebalances and shutdown wait until Faust's unacked messages are acked. The last
                # record of a list is acked last (batches commit in order): one message stands
                # for the list.
                self._stand_for(tp, messages[-1])
                try:
                    # Not interrupted when a rebalance stops the flow (Faust interrupts a put into a
                    # full queue): the handler waits only for a flush, which the rebalance waits for.
                    await handler(tp, messages)
                except asyncio.CancelledError:
                    # Stopped while it waited for a flush: stand for the records it took only.
                    self._unstand(messages[-1])
                    upto = taken(tp)
                    took = [r for r in messages if upto is not None and r.offset < upto]
                    if took:
                        self._stand_for(tp, took[-1])
                    raise
            self._read_offset[tp] = read
            commit_every = self._commit_every
            if commit_every is not None and self._n_acked >= commit_every:
                self._n_acked = 0
                await self.commit()


#: ``fetch_max_wait_ms`` on the embedded broker: short enough that a held fetch costs
#: little, long enough that an idle worker polls only 10 times a second.
EMBEDDED_FETCH_MAX_WAIT_MS = 100


def install(embedded_kafka: bool = False) -> None:
    """Make Faust's Kafka transport build :class:`WorkerConsumer` (the worker process only)."""
    ReadCommittedThread.fetch_max_wait_ms = EMBEDDED_FETCH_MAX_WAIT_MS if embedded_kafka else None
    faust_aiokafka.Transport.Consumer = WorkerConsumer
