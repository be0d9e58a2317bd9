"""Impression keys and multiplicity, Bloom filter sizing and hashing, MovieLens reading (no servers)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.bloom import BloomSpec, contains, members_bits
from pipeline.core.ids import pair_key, to_int64
from pipeline.files import Accepted, Refused, Skipped
from pipeline.kinds.impressions.aggregate import ImpressionCounts
from pipeline.kinds.impressions.decode import ImpressionDecoder
from pipeline.kinds.impressions.layout import impression_fields
from pipeline.kinds.relations.aggregate import RelationFilters
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.kinds.relations.files import read_movielens
from pipeline.kinds.relations.layout import relation_sides

KEYS_SCRIPT = (
    "from pipeline.core.ids import pair_key; print([pair_key(1, 2), pair_key('u', 'ä'), pair_key(7, '7')])"
)


def test_pair_key_is_stable_across_interpreters_and_hash_seeds() -> None:
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", KEYS_SCRIPT], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        outputs.add(out.stdout.strip())
    assert len(outputs) == 1
    assert outputs.pop() == str([pair_key(1, 2), pair_key("u", "ä"), pair_key(7, "7")])


def test_pair_keys_are_int64_and_types_matter() -> None:
    assert pair_key(7, 7) != pair_key("7", "7")
    assert pair_key(1, 2) != pair_key(2, 1)
    keys = [pair_key(u, i) for u in range(200) for i in range(200)]
    assert all(-(1 << 63) <= k < 1 << 63 for k in keys)
    assert len(set(keys)) == len(keys)
    assert to_int64((1 << 64) - 1) == -1


def test_batch_counts_real_multiplicity() -> None:
    agg = ImpressionCounts(ImpressionDecoder(1000, 300, clock=lambda: 2e9), impression_fields())
    for _ in range(3):
        assert agg.ingest(b'{"user": 1, "item": 9, "ts": 86400}', partition=2) is None
    assert agg.ingest(b'{"user": "bob", "item": 9, "ts": 90000}', partition=2) is None
    assert agg.ingest(b'{"user": "eve", "item": 9, "ts": 90000}', partition=0) is None
    assert agg.ingest(b'{"user": 1, "item": 9}') is not None  # no ts: schema
    plan = {(u.collection, u.id): u for u in agg.plan()}
    pair = plan[("imp_pairs", pair_key(1, 9))]
    assert pair.inc == {"c": 3} and pair.set_on_insert == {"u": 1, "i": 9}
    # item totals per source partition: each document has one writer, the partition's owner
    assert plan[("imp_items", "i9|2")].inc == {"c": 4} and plan[("imp_items", "i9|0")].inc == {"c": 1}
    assert plan[("imp_items", "i9|2")].set_on_insert == {"i": 9}
    assert plan[("imp_items_daily", "19700102|i9|2")].inc == {"c": 4}


def test_pair_documents_fit_in_40_bytes() -> None:
    import bson

    doc = {"_id": pair_key(943, 1682), "u": 943, "i": 1682, "c": 12}
    assert len(bson.encode(doc)) <= 40


@pytest.mark.parametrize(("n", "p", "m", "k"), [(1000, 0.01, 9600, 7), (300, 0.005, 3328, 8)])
def test_bloom_sizing_follows_the_standard_formulas(n: int, p: float, m: int, k: int) -> None:
    spec = BloomSpec.for_capacity(n, p)
    assert (spec.m, spec.k) == (m, k)
    assert spec.m % 64 == 0 and spec.expected_fpr(n) <= p * 1.05


def test_bloom_has_no_false_negatives_and_its_rate_near_p() -> None:
    spec = BloomSpec.for_capacity(300, 0.005)
    rng = random.Random(3)
    members = rng.sample(range(10**6), 300)
    words = {str(w): to_int64(m) for w, m in members_bits(members, spec).items()}
    assert all(contains(words, spec, x) for x in members)
    others = [x for x in range(10**6, 10**6 + 20_000)]
    fpr = sum(contains(words, spec, x) for x in others) / len(others)
    assert fpr <= 0.0075  # 0.5% configured; 20k probes leave room for sampling noise
    assert spec.positions(42) == BloomSpec.for_capacity(300, 0.005).positions(42)
    assert len(set(spec.positions(42))) == spec.k


def test_relations_plan_ors_words_on_both_sides() -> None:
    sides = relation_sides(50, 50, 0.01)
    agg = RelationFilters(RelationDecoder(1000), sides)
    agg.ingest(b'{"user": 1, "item": 2}')
    agg.ingest(b'{"user": 1, "item": 3}')
    plan = {(u.collection, u.id): u for u in agg.plan()}
    user_doc = plan[("rel_users", 1)]
    assert user_doc.inc == {"n": 2}
    assert set(user_doc.bit_or) <= {f"b.{w}" for w in range(sides.user_spec.words)}
    words = {k.split(".")[1]: v for k, v in user_doc.bit_or.items()}
    assert contains(words, sides.user_spec, 2) and contains(words, sides.user_spec, 3)
    assert ("rel_items", "i2|0") in plan and ("rel_items", "i3|0") in plan
    assert plan[("rel_items", "i2|0")].set_on_insert == {"i": 2}


def test_movielens_reader_keeps_ratings_of_4_and_more(tmp_path: Path) -> None:
    f = tmp_path / "u.data"
    f.write_text("196\t242\t3\t881250949\n186\t302\t4\t891717742\nbroken line\n22\t377\t5\t878887116\n")
    recs = list(read_movielens([str(f)]))
    assert [type(r) for r in recs] == [Skipped, Accepted, Refused, Accepted]
    assert isinstance(recs[1], Accepted) and recs[1].raw == b'{"user":186,"item":302,"ts":891717742}'
    assert isinstance(recs[2], Refused) and recs[2].line_no == 3
