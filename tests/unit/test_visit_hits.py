"""Hits forwarded to the visits stage (pipeline/core/visit_hits.py): packed per destination,
the same bytes when written again, each taken once whatever was sent twice; a damaged message
is a rejection naming what is wrong."""

from __future__ import annotations

import random
from collections import Counter

import bson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.forwarded import Forwarded
from pipeline.core.rejection import Rejection
from pipeline.core.visit_hits import ROW, Packed, VisitHit, pack, unpack
from pipeline.testing.packed import changed, rows_changed

H = 1_764_000_000.0


def dest4(site: str, visitor: int) -> int:
    return (hash(site) ^ visitor) % 4


hits_st = st.lists(
    st.builds(
        VisitHit,
        st.sampled_from(["a.example", "b.example"]),
        st.integers(0, 2**64 - 1),
        st.integers(0, 86_400).map(lambda s: H + s),
        st.text(min_size=1, max_size=40),
    ),
    max_size=200,
)


@given(hits_st, st.sampled_from([300, 2_000, 900_000]))
@settings(max_examples=200, deadline=None)
def test_every_hit_reaches_its_destination_once_in_order_in_bounded_messages(
    hits: list[VisitHit], max_bytes: int
) -> None:
    out = pack("hits", 3, 17, hits, dest4, max_bytes, destinations=range(4))
    # Every destination hears of the flush, hits or none: how far its source read.
    assert sorted(out) == ([0, 1, 2, 3] if hits else [])
    for d, messages in out.items():
        got: list[VisitHit] = []
        for i, raw in enumerate(messages):
            m = unpack(raw)
            assert isinstance(m, Packed) and (m.topic, m.partition, m.seq, m.index) == ("hits", 3, 17, i)
            assert m.high == max(h.ts for h in hits)
            assert len(raw) <= max_bytes or len(m.hits) == 1
            got.extend(m.hits)
        assert got == [h for h in hits if dest4(h.site, h.visitor) == d]
    assert sum(len(unpack_hits(ms)) for ms in out.values()) == len(hits)
    assert pack("hits", 3, 17, hits, dest4, max_bytes, range(4)) == out  # written again: the same


def unpack_hits(messages: list[bytes]) -> list[VisitHit]:
    out: list[VisitHit] = []
    for raw in messages:
        m = unpack(raw)
        assert isinstance(m, Packed)
        out.extend(m.hits)
    return out


def test_copies_in_any_order_within_a_flush_are_taken_once() -> None:
    """Two flushes of one source, the first's messages sent twice and out of order, a zombie's
    copy of the first after the second: every hit taken once."""
    rng = random.Random(5)
    flushes = [
        [VisitHit("s", rng.getrandbits(64), H + i, f"/{i % 7}") for i in range(n)] for n in (3_000, 2_000)
    ]
    sent: list[bytes] = []
    for seq, hits in enumerate(flushes, start=1):
        messages = pack("hits", 0, seq, hits, lambda s, v: 0, 20_000)[0]
        assert len(messages) > 2
        attempt = messages + rng.sample(messages, len(messages) // 2)
        rng.shuffle(attempt)
        sent.extend(attempt)
    sent.append(pack("hits", 0, 1, flushes[0], lambda s, v: 0, 20_000)[0][0])  # a zombie, late
    taken = Forwarded()
    got: list[VisitHit] = []
    for raw in sent:
        m = unpack(raw)
        assert isinstance(m, Packed)
        if taken.take((m.topic, m.partition), m.seq, m.index):
            got.extend(m.hits)
    assert Counter(got) == Counter(flushes[0] + flushes[1]) and taken.copies > 0


def _packed() -> bytes:
    return pack("hits", 1, 2, [VisitHit("s", 7, H, "/"), VisitHit("s", 8, H + 1, "/b")], lambda s, v: 0)[0][0]


def _message(**change: object) -> bytes:
    return changed(_packed(), **change)


def _rows(**column: object) -> bytes:
    return rows_changed(_packed(), ROW, **column)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"\x05\x00\x00\x00", "not a BSON document"),
        (_message(v=9), "version 9"),
        (_message(t=""), "no source topic"),
        (_message(s=-1), "s is -1"),
        (_message(i=True), "i is True"),
        (_message(p="0"), "p is '0'"),
        (_message(sites="s"), "sites is not a list"),
        (_message(rows=bson.Binary(b"\x00" * 7)), "whole"),
        (_message(hi=float("nan")), "hi is nan"),
        (_message(hi=H), "past the flush's highest"),
        (_message(end=1), "end is 1"),
        (_message(idle=[-1]), "idle is"),
        (_rows(page=5), "does not list"),
        (_rows(ts=float("nan")), "not finite"),
    ],
)
def test_a_damaged_message_is_a_rejection_naming_what_is_wrong(raw: bytes, says: str) -> None:
    got = unpack(raw)
    assert isinstance(got, Rejection) and got.reason == "visit-hits" and says in got.detail and got.raw == raw


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_bytes_unpack_or_are_rejected(raw: bytes) -> None:
    assert isinstance(unpack(raw), Packed | Rejection)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8))
@settings(max_examples=500, deadline=None)
def test_a_message_with_bytes_changed_unpacks_or_is_rejected(changes: list[tuple[int, int]]) -> None:
    raw = bytearray(_message())
    for at, byte in changes:
        raw[at % len(raw)] = byte
    assert isinstance(unpack(bytes(raw)), Packed | Rejection)
