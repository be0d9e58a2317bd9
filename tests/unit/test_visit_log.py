"""The visitors' log (pipeline/kinds/hits/visit_log.py) and the array work of the plan
(pipeline/kinds/hits/visits.py, holder_hashes): the same holders and hashes as sets give."""

import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.uniques import explicit_chunk, register_of, register_ranks_of
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.visit_log import KEY_UNIT, VisitLog
from pipeline.kinds.hits.visitors import keyed_hash
from pipeline.kinds.hits.visits import Places, holder_hashes


def test_a_visitor_logged_twice_is_one_visitor_of_its_key() -> None:
    log = VisitLog()
    assert not log and log.weight() == 0
    for key, ident in [
        (("s", "/", 1), 7),
        (("s", "/", 1), 7),
        (("s", "/a", 1), 7),
        (("s", "/", 1), 1 << 127),
    ]:
        log.add(key, ident)
    assert len(log) == 4 and list(log) == [("s", "/", 1), ("s", "/a", 1)]
    assert log.as_sets() == {("s", "/", 1): {7, 1 << 127}, ("s", "/a", 1): {7}}
    keys, hi, lo = log.distinct()
    assert keys.tolist() == [0, 0, 1] and hi.tolist() == [0, 1 << 63, 0] and lo.tolist() == [7, 0, 7]
    assert 0 < log.weight() < 4  # in aggregate keys: a few hundred bytes
    later = VisitLog.of({("s", "/b", 5): [1], ("s", "/a", 3): [2], ("s", "/b", 1): [3, 1]})
    assert list(later) == [("s", "/b", 5), ("s", "/a", 3), ("s", "/b", 1)]  # first seen, not sorted
    assert later.distinct()[0].tolist() == [0, 1, 2, 2]
    many = VisitLog.of({("s", f"/p{i}", 1): range(10) for i in range(1000)})
    assert many.weight() * KEY_UNIT >= 10_000 * 20  # at least its arrays' bytes


def register_ranks(hashes: list[int]) -> dict[int, int]:
    """The scalar reference: register index → the highest rank the hashes offer it."""
    ranks: dict[int, int] = {}
    for h in hashes:
        i, rank = register_of(h)
        ranks[i] = max(rank, ranks.get(i, 0))
    return ranks


@given(st.lists(st.integers(0, (1 << 64) - 1), unique=True, max_size=300))
def test_the_array_form_of_ranks_is_the_scalar_one(hashes: list[int]) -> None:
    arr = np.array(hashes, dtype=np.uint64)
    dense = register_ranks_of(arr)
    nonzero = np.flatnonzero(dense)
    assert dict(zip(nonzero.tolist(), dense[nonzero].tolist(), strict=True)) == register_ranks(hashes)


def test_each_holder_gets_the_keyed_hashes_of_every_visitor_of_its_keys() -> None:
    """A reference in sets: per holder, the union of its keys' visitors hashed with their day's key."""
    rng = random.Random(3)
    people = [rng.getrandbits(128) for _ in range(50)]
    visits: dict[tuple[str, str, int], set[int]] = {}
    for day in range(3):
        for _ in range(40):
            key = (rng.choice("st"), f"/p{rng.randrange(8)}", 96 * day + rng.randrange(96))
            visits.setdefault(key, set()).update(rng.choice(people) for _ in range(rng.randrange(1, 6)))
    docs: dict[tuple[str, int], DocUpdate] = {}
    months: dict[str, DocUpdate] = {}

    def day_of(site: str, slot: int) -> tuple[int, int]:
        return 700_000 + slot // 96, slot // 96 * 1440

    def documents(
        site: str, page: str, ordinal: int, start: int
    ) -> tuple[list[DocUpdate], list[DocUpdate], bool]:
        day = ordinal - 700_000
        assert start == day * 1440
        upd = docs.setdefault((site + page, day), DocUpdate("c", f"{site}{page}/{day}", {}, {}))
        site_day = docs.setdefault((site, day), DocUpdate("c", f"{site}/{day}", {}, {}))
        month = months.setdefault(page, DocUpdate("m", page, {}, {}))  # one month for both sites
        return [site_day, upd], [month], page != "/p0"  # /p0's days keep no hours

    def key_of(ordinal: int) -> bytes:
        return ordinal.to_bytes(32, "big")

    want: dict[tuple[str, str], set[int]] = {}
    for (site, page, slot), idents in visits.items():
        ordinal, start = day_of(site, slot)
        days, month_docs, hours = documents(site, page, ordinal, start)
        where = [(u, "v") for u in days] + [(u, "mv") for u in month_docs]
        if hours:
            where += [(u, f"vh.{(slot * 15 - start) // 60}") for u in days]
        for upd, path in where:
            want.setdefault((upd.id, path), set()).update(keyed_hash(key_of(ordinal), i) for i in idents)
    holders, grouped = holder_hashes(VisitLog.of(visits), Places(day_of, documents, "v", "vh", "mv"), key_of)
    got = {(upd.id, path): hashes for (upd, path), hashes in zip(holders, grouped, strict=True)}
    assert len(got) == len(holders)  # each holder once
    assert {k: {h & (1 << 64) - 1 for h in v.tolist()} for k, v in got.items()} == want
    # each holder's hashes as its explicit chunk stores them: distinct, signed, ascending
    assert all(bytes(explicit_chunk(v.tolist())) == v.astype("<i8").tobytes() for v in got.values())


def test_visits_with_no_holder_go_nowhere() -> None:
    """Pages refused a document of their own, in a plan that writes no rollup: no holder."""

    def nowhere(
        site: str, page: str, ordinal: int, start: int
    ) -> tuple[list[DocUpdate], list[DocUpdate], bool]:
        return [], [], True

    places = Places(lambda site, slot: (700_000, 0), nowhere, "v", "vh", "mv")
    assert holder_hashes(VisitLog.of({("s", "/", 3): {1, 2}}), places, lambda o: b"k" * 32) == ([], [])
