"""Rebalances and exits that a store outage cannot stretch: a bounded revoke drain, LeaveGroup.

Faust's rebalance waits for every delivered message to be acked (committed to MongoDB
here), and a worker ending with ``os._exit`` keeps its partitions until its session
times out. :func:`bound_revoke_drain` bounds the first, :func:`leave_group` ends the
second; the worker app wires both (docs/operations.md, "Rebalances during an outage").

On the embedded broker the group's leader never sends LeaveGroup (:func:`track_leadership`):
Tansu 0.6 removes a member that leaves while its group re-forms but keeps it as the
group's leader, and every later member then waits for that ghost's assignment for good
(the wedge: a follower's leave re-forms the group, then the leader's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import faust
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
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
        # A list let go of stood for the other reader's records of it too: once released, the
        # wait for acks no longer covers them, so the drain also waits for one flush of all.
        released = release(consumer, flushers)
        if app.should_stop or not app.conf.stream_wait_empty:
            await waits(consumer, logger)
            if released:
                await flush_all(flushers)
            return
        log.info("rebalance: committing what was delivered (at most %.0fs)", bound)
        watchdog = asyncio.ensure_future(give_up(consumer))
        # Commit at once: in a backlog the batch being filled is otherwise written only when it
        # is `backlog_flush_interval` old, and the drain (which waits for every delivered
        # message's ack) overran its bound and dropped it.
        now = asyncio.ensure_future(flush_all(flushers))
        try:
            await waits(consumer, logger)
            if released:
                await asyncio.wait([now])  # ends with it, or with the bound's abandon cancelling it
        finally:
            watchdog.cancel()
            if not now.done():
                now.cancel()

    app._consumer_wait_empty = bounded  # type: ignore[method-assign]


def release(consumer: Any, flushers: list[Flusher[Any]]) -> int:
    """Records a reader let go of are not waited for: nothing acked them, so the partitions'
    next owner reads them again from Kafka's committed offsets. Returns the partitions released."""
    released = 0
    for f in flushers:
        for (topic, partition), start in f.release().items():
            released += 1
            lists = cast(WorkerConsumer, consumer).release(topic, partition, start)
            log.info(
                "%s[%d]: %s let go of offsets %d on (%d delivered lists); read again after the rebalance",
                topic,
                partition,
                f.stream,
                start,
                lists,
            )
    return released


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


#: Attribute set on aiokafka's coordinator: its last join made it the group's leader.
LEADER = "preagg_leader"
#: Attribute set on aiokafka's coordinator: the leader its last JoinGroup answer named.
LAST_LEADER = "preagg_last_leader"


def track_leadership(skip_leader_leave: bool) -> None:
    """Note on each coordinator whether its last join elected it leader; with
    ``skip_leader_leave`` (the embedded broker), the leader's LeaveGroup is never sent.

    Tansu 0.6's coordinator (``tansu-broker/src/coordinator/group/administrator.rs``,
    ``Inner<O, Forming>::leave``) removes a leaving member while the group re-forms but
    leaves ``state.leader`` pointing at it; a joining member becomes leader only when there
    is none, and the leader is cleared only when a *member* misses its heartbeats, so the
    group waits for the ghost's SyncGroup for ever. Without the leader's LeaveGroup its
    member stays until its session times out (``session_timeout``), and a missed heartbeat
    does clear the leader: the others are reassigned that much later, never wedged. A
    leader is the same member until it leaves or misses its session (a joining member
    takes the role only when there is none), so the last join's answer is current.
    Real Kafka elects a new leader on any leave: the flag is then only informative.
    """
    if getattr(CoordinatorGroupRebalance, "_preagg_tracked", False):
        GroupCoordinator._preagg_skip_leader_leave = skip_leader_leave
        return
    on_leader = CoordinatorGroupRebalance._on_join_leader
    on_follower = CoordinatorGroupRebalance._on_join_follower
    maybe_leave = GroupCoordinator._maybe_leave_group
    send_req = GroupCoordinator._send_req

    async def send(self: Any, request: Any) -> Any:
        response = await send_req(self, request)
        leader = getattr(response, "leader_id", None)  # JoinGroup answers only
        if leader is not None:
            setattr(self, LAST_LEADER, leader)
        return response

    async def join_leader(self: Any, response: Any) -> Any:
        setattr(self._coordinator, LEADER, True)
        return await on_leader(self, response)

    async def join_follower(self: Any) -> Any:
        setattr(self._coordinator, LEADER, False)
        return await on_follower(self)

    async def leave(self: Any) -> None:
        if skips_leave(self):
            log.info("not leaving the group as its leader on the embedded broker (its session ends it)")
            self.reset_generation()
            return
        await maybe_leave(self)

    CoordinatorGroupRebalance._on_join_leader = join_leader
    CoordinatorGroupRebalance._on_join_follower = join_follower
    GroupCoordinator._maybe_leave_group = leave
    GroupCoordinator._send_req = send
    GroupCoordinator._preagg_skip_leader_leave = skip_leader_leave
    CoordinatorGroupRebalance._preagg_tracked = True


def skips_leave(coordinator: Any) -> bool:
    """Whether this coordinator must not send LeaveGroup (the embedded broker's leader)."""
    skip = getattr(coordinator, "_preagg_skip_leader_leave", False)
    return bool(skip and getattr(coordinator, LEADER, False))


def coordinator_of(app: faust.App) -> tuple[Any, Any]:
    """aiokafka's group coordinator of the app's consumer and its thread's loop (``None`` before both)."""
    consumer = getattr(app, "_consumer", None)
    thread = getattr(consumer, "_thread", None)
    coordinator = getattr(getattr(thread, "_consumer", None), "_coordinator", None)
    return coordinator, getattr(thread, "thread_loop", None)


def last_join(app: faust.App) -> tuple[str, str | None]:
    """This worker's member id and the leader its last JoinGroup answer named (``""``, ``None``: none yet)."""
    coordinator, _ = coordinator_of(app)
    if coordinator is None:
        return "", None
    return str(coordinator.member_id or ""), getattr(coordinator, LAST_LEADER, None)


def membership(app: faust.App) -> str:
    """``member M, generation G, leader`` as the worker's coordinator knows it, for a log line."""
    coordinator, _ = coordinator_of(app)
    if coordinator is None:
        return "no consumer yet"
    member = coordinator.member_id or "(none)"
    led = getattr(coordinator, LEADER, None)
    role = "" if led is None else ", leader" if led else ", follower"
    return f"member {member}, generation {coordinator.generation}{role}"


def leave_group(app: faust.App, timeout: float) -> None:
    """Send LeaveGroup from the Kafka consumer's own thread (works while the main loop is stuck).

    Without it, partitions of a worker that ends with ``os._exit`` stay assigned to it
    until its session times out. Best effort within ``timeout``. Sent whatever the
    generation: aiokafka's own leave skips generation 0, which the embedded broker
    hands out first.
    """
    coordinator, loop = coordinator_of(app)
    if coordinator is None or loop is None or not loop.is_running():
        log.warning("cannot leave the consumer group: its consumer is not running")
        return
    if coordinator.member_id == JoinGroupRequest.UNKNOWN_MEMBER_ID:
        return  # not a member
    if skips_leave(coordinator):
        log.info("not leaving the group as its leader on the embedded broker (its session ends it)")
        return

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
