"""DescribeGroups answers read as members and the partitions they hold (pure)."""

from __future__ import annotations

from aiokafka.protocol.group import MemberAssignment

from pipeline.kafka.group import GroupView, Member, assigned_partitions, parse_group


def _assignment(parts: dict[str, list[int]]) -> bytes:
    return bytes(MemberAssignment(0, list(parts.items()), b"").encode())


def test_an_assignment_decodes_to_its_partitions() -> None:
    assert assigned_partitions(_assignment({"hits": [0, 2]})) == ("hits[0]", "hits[2]")
    assert assigned_partitions(b"") == ()
    assert assigned_partitions(b"\x00\x01garbage") is None  # unknown, not empty


def test_a_v0_and_a_v4_group_parse_alike() -> None:
    held = _assignment({"hits": [1]})
    v0 = (
        0,
        "preagg",
        "Stable",
        "consumer",
        "faust",
        [("m-1", "c-1", "/127.0.0.1", b"", held), ("m-2", "c-2", "/h", b"", b"")],
    )
    v4 = (0, "preagg", "Stable", "consumer", "faust", [("m-1", None, "c-1", "/127.0.0.1", b"", held)], 0)
    for raw in (v0, v4):
        view = parse_group(raw)
        assert view.state == "Stable" and view.members[0] == Member("m-1", "c-1", "/127.0.0.1", ("hits[1]",))
    assert parse_group(v0).holding() == 1
    assert "m-2@h (0 partitions)" in parse_group(v0).summary()


def test_a_group_with_no_members_says_so() -> None:
    assert GroupView("g", "Empty", ()).summary() == "group g: state Empty, 0 member(s): no members"
