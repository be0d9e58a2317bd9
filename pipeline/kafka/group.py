"""What the broker says about a consumer group: its state and each member's partitions.

Read by ``preagg status`` and by a worker that is not let start, so that a group in
which members hold nothing while partitions wait is named with its members.
DescribeGroups answers the members' assignments as the consumer protocol encodes them;
one that does not decode (another protocol) counts as unknown, never as empty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.errors import for_code
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest, MemberAssignment

from pipeline.kafka.options import KafkaConnection

log = logging.getLogger("preagg.kafka")


@dataclass(frozen=True)
class Member:
    """One member: its id, client id, host, and the partitions it was given (``None``: unreadable)."""

    member_id: str
    client_id: str
    host: str
    partitions: tuple[str, ...] | None

    def describe(self) -> str:
        """``member@host (3 partitions)`` for one line of a log or of ``preagg status``."""
        held = "?" if self.partitions is None else str(len(self.partitions))
        return f"{self.member_id}@{self.host.lstrip('/')} ({held} partitions)"


@dataclass(frozen=True)
class GroupView:
    """A group as DescribeGroups answers it."""

    group_id: str
    state: str
    members: tuple[Member, ...]
    #: The assignor the group agreed on (``faust`` for workers); empty when none yet.
    protocol: str = ""

    def holding(self) -> int:
        """Members that hold at least one partition."""
        return sum(1 for m in self.members if m.partitions)

    def summary(self) -> str:
        """One line: state, members and what each holds."""
        who = ", ".join(m.describe() for m in self.members) or "no members"
        return f"group {self.group_id}: state {self.state or '?'}, {len(self.members)} member(s): {who}"


def assigned_partitions(raw: bytes) -> tuple[str, ...] | None:
    """``topic[p]`` for each partition in a consumer-protocol assignment (``None``: not one)."""
    if not raw:
        return ()
    try:
        decoded = MemberAssignment.decode(raw)
        return tuple(f"{topic}[{p}]" for topic, parts in decoded.assignment for p in parts)
    except Exception:  # not the consumer protocol, or truncated: unknown, not empty
        return None


def parse_group(group: Any) -> GroupView:
    """A :class:`GroupView` from one group of a DescribeGroups response (any version)."""
    fields = list(group)
    # v0..v2: (error_code, group_id, state, protocol_type, protocol, members); v3+ adds
    # authorized operations last; the members are the first list after the protocol.
    error_code, group_id, state = fields[0], fields[1], fields[2]
    members_raw = next((f for f in fields[5:] if isinstance(f, list)), [])
    if error_code:
        log.info("DescribeGroups %s: error code %s", group_id, error_code)
    members = tuple(
        Member(str(m[0]), str(m[-4] if len(m) > 4 else ""), str(m[-3]), assigned_partitions(m[-1]))
        for m in members_raw
    )
    return GroupView(str(group_id), str(state or ""), members, str(fields[4] or ""))


async def describe_group(conn: KafkaConnection, group_id: str) -> GroupView | None:
    """The group as the broker describes it, or ``None`` when the broker cannot say."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    try:
        await admin.start()
        responses = await admin.describe_consumer_groups([group_id])
        for resp in responses:
            for group in resp.groups:
                return parse_group(group)
        return None
    except Exception as exc:  # the broker down or without DescribeGroups: say nothing, not wrong
        log.info("cannot describe consumer group %s (%s: %s)", group_id, type(exc).__name__, exc)
        return None
    finally:
        await admin.close()


async def _to_coordinator(conn: KafkaConnection, group_id: str, request: Any) -> Any:
    """Send one request to the group's coordinator on a connection of its own; its answer."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    await admin.start()
    try:
        node = await admin.find_coordinator(group_id)
        return await admin._client.send(node, request)
    finally:
        await admin.close()


async def join_as(
    conn: KafkaConnection,
    group_id: str,
    member_id: str,
    protocol: str,
    topics: list[str],
    session_timeout_ms: int,
) -> str:
    """Send one JoinGroup for ``member_id`` (``""``: a new member) and nothing after it.

    The member then misses its heartbeats and its session ends it: on the embedded broker
    that is how a ghost leader is cleared (:mod:`pipeline.worker.ghost`), and how a test
    makes one. Returns the member id the broker answered; raises the broker's error.
    """
    metadata = bytes(ConsumerProtocolMemberMetadata(0, topics, b"").encode())
    request = JoinGroupRequest(
        group_id, session_timeout_ms, session_timeout_ms, member_id, "", "consumer", [(protocol, metadata)]
    )
    response = await _to_coordinator(conn, group_id, request)
    if response.error_code:
        raise for_code(response.error_code)(f"JoinGroup {group_id} as {member_id or 'a new member'}")
    return str(response.member_id)


async def leave_as(conn: KafkaConnection, group_id: str, member_id: str) -> None:
    """Send one LeaveGroup for ``member_id`` (a test's way to leave a ghost leader behind)."""
    await _to_coordinator(conn, group_id, LeaveGroupRequest(group_id, member_id))
