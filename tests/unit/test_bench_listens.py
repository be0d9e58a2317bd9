"""`make bench-listens` judging stored documents (it crashed on the stored BinData filter)."""

from __future__ import annotations

from benchmarks.listens import judge, stored_doc
from pipeline.core.bloom import filter_bytes, masks_value, members_bits
from pipeline.kinds.listens.heard import LEGACY, HeardSpec
from pipeline.kinds.listens.layout import listen_fields

F = listen_fields()


def test_judge_reads_documents_as_pymongo_returns_them() -> None:
    spec = HeardSpec()
    small, big = stored_doc(40, spec), stored_doc(600, spec)  # explicit sketch; filters
    legacy = stored_doc(300, spec)  # an older document: one BinData filter of song ids, no filters
    legacy.pop(F["filters"])
    legacy[F["heard"]] = filter_bytes(masks_value(members_bits(range(300), LEGACY)))
    docs = {(1, 1): small, (1, 2): big, (1, 3): legacy}
    exact = {(1, 1): set(range(40)), (1, 2): set(range(600)), (1, 3): set(range(300))}
    out = judge(docs, exact, F, spec)
    assert out["heard_false_negatives"] == 0
    assert out["documents_with_filters"] == 1
    assert set(out["accuracy_by_distinct"]) == {"10-99", "100-999"}
    assert out["accuracy_by_distinct"]["10-99"]["max_rel_error"] == 0  # explicit: exact
    assert out["document_bytes_mean"] > 0 and out["heard_probes"] > 0
