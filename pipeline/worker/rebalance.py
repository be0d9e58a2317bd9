"""Rebalances and exits that a store outage cannot stretch: a bounded revoke drain, LeaveGroup.

Faust's rebalance waits for every delivered message to be acked (committed to MongoDB
here), and a worker ending with ``os._exit`` keeps its partitions until its session
times out. :func:`bound_revoke_drain` bounds the first, :func:`leave_group` ends the
second; the worker app wires both (docs/operations.md, "Rebalances during an outage").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import faust
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from pipeline.worker.consumer import WorkerConsumer
from pipeline.worker.flusher import Flusher

log = logging.getLogger("preagg.worker")


def bound_revoke_drain(app: faust.App, flushers: list[Flusher[Any]], bound: float) -> None:
    """A rebalance waits at most ``bound`` seconds for uncommitted batches, then drops them.

    Faust's revoke waits until every delivered message is acked, which here means
    committed to MongoDB: with the store down, up to every queued batch's commit
    deadline, past the group's rebalance timeout, after which Kafka evicts the member
    and its late commits fence the partitions' new owners (exit 75 storms). Dropping
    is safe: nothing dropped was acked (:meth:`Flusher.abandon`). A stop (SIGTERM) keeps
    the unbounded wait: it has its own deadline (:mod:`pipeline.worker.shutdown`).

    The bound is a task of its own beside Faust's wait, not a cancellation of it:
    Faust's ``_wait_for_ack`` swallows ``CancelledError``, so ``wait_for`` around its
    wait returned only when the store came back.
    """
    waits = app._consumer_wait_empty

    async def give_up(consumer: Any) -> None:
        await asyncio.sleep(bound)
        dropped = {f.stream: await f.abandon() for f in flushers}
        lists = cast(WorkerConsumer, consumer).abandon_unacked()
        log.warning(
            "rebalance: uncommitted batches not committed within %.0fs (store slow or down?); dropped "
            "%s (%d delivered lists, unacked): they are read again from Kafka's committed offsets "
            "and counted once by whoever owns their partitions",
            bound,
            ", ".join(f"{n} {stream} events" for stream, n in dropped.items() if n) or "nothing",
            lists,
        )

    async def bounded(consumer: Any, logger: Any) -> None:
        if app.should_stop or not app.conf.stream_wait_empty:
            await waits(consumer, logger)
            return
        log.info("rebalance: committing what was delivered (at most %.0fs)", bound)
        watchdog = asyncio.ensure_future(give_up(consumer))
        # Commit at once: in a backlog the batch being filled is otherwise written only when it
        # is `backlog_flush_interval` old, and the drain (which waits for every delivered
        # message's ack) overran its bound and dropped it (issue 37, item 7).
        now = asyncio.ensure_future(flush_all(flushers))
        try:
            await waits(consumer, logger)
        finally:
            watchdog.cancel()
            if not now.done():
                now.cancel()

    app._consumer_wait_empty = bounded  # type: ignore[method-assign]


async def flush_all(flushers: list[Flusher[Any]]) -> None:
    """Flush every stream now (sealed batches and the one being filled); failures are the flush's
    own to log and retry, and an abandon (the drain's bound) cancels this."""
    for f in flushers:
        try:
            await f.flush()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged by the flusher's retry loop; the drain's bound still holds
            log.warning("rebalance: flush of %s failed (%s: %s)", f.stream, type(exc).__name__, exc)


def leave_group(app: faust.App, timeout: float) -> None:
    """Send LeaveGroup from the Kafka consumer's own thread (works while the main loop is stuck).

    Without it, partitions of a worker that ends with ``os._exit`` stay assigned to it
    until its session times out. Best effort within ``timeout``. Sent whatever the
    generation: aiokafka's own leave skips generation 0, which the embedded broker
    hands out first.
    """
    consumer = getattr(app, "_consumer", None)
    thread = getattr(consumer, "_thread", None)
    coordinator = getattr(getattr(thread, "_consumer", None), "_coordinator", None)
    loop = getattr(thread, "thread_loop", None)
    if coordinator is None or loop is None or not loop.is_running():
        log.warning("cannot leave the consumer group: its consumer is not running")
        return
    if coordinator.member_id == JoinGroupRequest.UNKNOWN_MEMBER_ID:
        return  # not a member

    async def leave() -> None:
        await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))

    future = asyncio.run_coroutine_threadsafe(leave(), loop)
    try:
        future.result(timeout)
    except Exception as exc:  # best effort on the way out
        future.cancel()
        log.warning("LeaveGroup did not complete within %.0fs: %s", timeout, exc)
    else:
        log.info("left the consumer group %s (member %s)", coordinator.group_id, coordinator.member_id)
