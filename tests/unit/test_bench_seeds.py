"""`make bench-seeds` scoring top-10 lists against the exact answer (ties count as right)."""

from __future__ import annotations

from datetime import date

from benchmarks.seeds import agreement, pick_users


def test_lists_are_judged_by_exact_counts_whatever_the_tie_order() -> None:
    day = date(2009, 4, 1)
    listens = [(1, tag, song, day) for tag in range(12) for song in range(12 - tag)]  # tag t: 12 - t songs
    listens += [(1, 99, 5, date(2009, 1, 1))]  # outside the user's last week
    listens += [(2, 1, 1, day)]
    (u, v) = pick_users(listens, 2)
    assert (u["user"], u["tags_in_window"], u["lo"], u["hi"]) == (1, 12, "2009-03-26", "2009-04-01")
    right = [[t, float(12 - t)] for t in range(10)]
    assert agreement([u], {"1": right}) == {"lists_right": 1, "lists": 1, "rows_right": 10, "rows": 10}
    wrong = [*right[:9], [11, 1.0]]  # tag 11 has 1 song: not in the top 10 (the 10th has 3)
    assert agreement([u], {"1": wrong})["rows_right"] == 9
    assert agreement([v], {"2": [[1, 1.0]]})["lists_right"] == 1
