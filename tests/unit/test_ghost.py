"""Which group waits for a ghost leader (pure): a leader not among the members, when nobody holds anything."""

from __future__ import annotations

from pipeline.kafka.group import GroupView, Member
from pipeline.worker.ghost import ghost_leader

WAITING = GroupView("g", "Unknown", (Member("c", "", "", ()),), "faust")


def test_a_leader_who_is_not_a_member_is_a_ghost() -> None:
    assert ghost_leader(WAITING, own="c", leader="gone") == "gone"


def test_no_ghost_when_the_leader_is_a_member_or_this_worker_or_unknown() -> None:
    assert ghost_leader(WAITING, own="c", leader="c") is None
    assert ghost_leader(WAITING, own="c", leader=None) is None
    assert ghost_leader(None, own="c", leader="gone") is None
    both = GroupView("g", "Unknown", (Member("c", "", "", ()), Member("a", "", "", ())), "faust")
    assert ghost_leader(both, own="c", leader="a") is None  # a live leader that is slow to sync


def test_a_group_that_assigns_waits_for_nobody() -> None:
    holding = GroupView("g", "Stable", (Member("c", "", "", ("hits[0]",)),), "faust")
    assert ghost_leader(holding, own="c", leader="gone") is None
