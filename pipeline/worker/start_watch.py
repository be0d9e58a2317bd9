"""A worker the group never lets start is not silent: a warning from a thread of its own, and the
embedded broker's ghost leader cleared."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import faust

from pipeline.kafka.group import describe_group
from pipeline.kafka.options import KafkaConnection
from pipeline.kinds import stream_topics
from pipeline.settings import Settings
from pipeline.worker.ghost import clear_ghost, ghost_leader
from pipeline.worker.rebalance import last_join, membership

log = logging.getLogger("preagg.worker")

#: Set once the worker is ready (Faust started its tasks: the group gave it its assignment).
STARTED = threading.Event()


def watch_start(bound: float, context: Callable[[], str] = lambda: "") -> threading.Thread:
    """A WARNING every ``bound`` seconds until the worker is ready, from a thread of its own.

    Faust runs the worker's tasks only once the group has answered its join: a worker the
    group never assigns (the embedded broker's wedge after two workers stopped at once)
    printed nothing at all. Its own checks cannot run then; this one can, and
    says what the worker and the broker know of the group (``context``).
    """

    def warn() -> None:
        waited = 0.0
        while not STARTED.wait(bound):
            waited += bound
            try:
                known = context()
            except Exception as exc:  # the look is best effort; the warning is not
                known = f"group not described ({type(exc).__name__}: {exc})"
            log.warning(
                "not ready after %.0f s: the consumer group has not let this worker start (no "
                "assignment); %s. `preagg status` shows which partitions nothing counts "
                '(docs/operations.md, "A worker the group never lets start")',
                waited,
                known,
            )

    thread = threading.Thread(target=warn, name="preagg-start-watch", daemon=True)
    thread.start()
    return thread


def group_context(settings: Settings, app: faust.App) -> Callable[[], str]:
    """What :func:`watch_start` says: this worker's membership and the broker's view of the group;
    on the embedded broker, a ghost leader the group waits for is cleared (:mod:`.ghost`)."""
    conn = KafkaConnection.of(settings)

    async def look_and_clear() -> str:
        group = await describe_group(conn, settings.group_id)
        said = f"{membership(app)}; " + (
            group.summary() if group else "the broker does not describe the group"
        )
        own, leader = last_join(app)
        ghost = ghost_leader(group, own, leader)
        if group is not None and ghost is not None:
            if not settings.embedded_kafka:
                return f"{said}; its leader {ghost} is not a member"
            cleared = await clear_ghost(conn, group, ghost, stream_topics(settings), settings.session_timeout)
            return f"{said}; {cleared}"
        return said

    return lambda: asyncio.run(look_and_clear())
