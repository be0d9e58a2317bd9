"""A group that waits for a leader who is not a member: found, and cleared on the embedded broker.

Tansu 0.6 keeps a member that leaves while its group re-forms as the group's leader
(:mod:`pipeline.worker.rebalance`): every member that joins then waits for that ghost's
assignment for good. preagg's workers no longer leave as leaders there, but any client
can still make one (a consumer that joins and leaves without syncing, an older preagg).
A worker the group has not let start looks (every 2 x session timeout + 30 s, from the
start watch): if the leader its JoinGroup answers name is not among the members the
broker describes, and no member holds a partition, it sends one JoinGroup *as the ghost*.
The ghost is a member again, misses its heartbeats, and the broker's session check then
clears the leader; the waiting worker becomes leader at its next join. On a real broker a
leave elects a new leader: the look only reports.
"""

from __future__ import annotations

import logging

from pipeline.kafka.group import GroupView, join_as
from pipeline.kafka.options import KafkaConnection

log = logging.getLogger("preagg.worker")


def ghost_leader(view: GroupView | None, own: str, leader: str | None) -> str | None:
    """The leader the group waits for that is not one of its members, or ``None`` (pure).

    Only when no member holds a partition: a group that assigns is not waiting for anyone.
    """
    if view is None or not leader or leader == own or view.holding():
        return None
    if any(m.member_id == leader for m in view.members):
        return None
    return leader


async def clear_ghost(
    conn: KafkaConnection, view: GroupView, ghost: str, topics: list[str], session_timeout: float
) -> str:
    """Rejoin as ``ghost`` so that its session ends it; the line to log."""
    protocol = view.protocol or "faust"
    await join_as(conn, view.group_id, ghost, protocol, topics, int(session_timeout * 1000))
    return (
        f"the group waits for leader {ghost}, who is not a member (the embedded broker keeps a leader "
        f"that left while the group re-formed): rejoined as it once, so that its session ends it and "
        f"this worker leads at its next join, within about {2 * session_timeout:.0f} s"
    )
