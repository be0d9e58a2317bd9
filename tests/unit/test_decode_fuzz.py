"""Any bytes on a topic decode to an event or a rejection, never an exception (hypothesis).

Every kind's decoder, in every input format, is fed random bytes, deep nesting,
huge numbers, invalid UTF-8 and NULs, raw and inside the replay wrapper and the
log shippers' envelopes: a worker's batch treats an exception as fatal, so one
such message would crash-loop every worker on its offset.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.decode import MAX_DEPTH
from pipeline.core.rejection import Rejection
from pipeline.core.shippers import InputFormat
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.impressions.decode import ImpressionDecoder
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.worker.batch import new_batch

NOW = 1_700_000_000.0
Decode = Callable[[bytes], Any]


def decoders() -> dict[str, Decode]:
    out: dict[str, Decode] = {}
    for fmt in get_args(InputFormat):
        out[f"hits/{fmt}"] = HitDecoder(4096, 300, clock=lambda: NOW, fmt=fmt).decode
        out[f"listens/{fmt}"] = ListenDecoder(4096, 300, clock=lambda: NOW, fmt=fmt).decode
        out[f"impressions/{fmt}"] = ImpressionDecoder(4096, 300, clock=lambda: NOW, fmt=fmt).decode
        out[f"relations/{fmt}"] = RelationDecoder(4096, fmt=fmt).decode
    return out


DECODERS = decoders()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
fields = st.sampled_from(["site", "page", "ts", "props", "user", "item", "tag", "song", "message", "log"])


def _nest(depth: int, open_: str, close: str, core: str = "1") -> str:
    return open_ * depth + core + close * depth


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """JSON-ish objects near each kind's schema, with hostile values spliced in."""
    obj: dict[str, Any] = {
        "site": "s",
        "page": "/p",
        "ts": NOW - 5,
        "user": 1,
        "item": 2,
        "tag": 3,
        "song": 4,
    }
    for _ in range(draw(st.integers(0, 3))):
        obj[draw(fields)] = draw(json_values)
    text = json.dumps(obj) if draw(st.booleans()) else "{}"
    depth = draw(st.sampled_from([0, 10, 200, 255, 256, 300, 1000, 2000]))
    if depth:
        deep = _nest(depth, draw(st.sampled_from(["[", '{"a":'])), "", "1")
        deep += "]" * depth if deep.startswith("[") else "}" * depth
        where = draw(st.sampled_from(["props", "ts", "site", "user", "x"]))
        inner = f'{{"a":{deep}}}' if where == "props" else deep
        text = text[:-1] + ("," if len(text) > 2 else "") + f'"{where}":{inner}}}'
    huge = ["", "1e308", "1e309", "-1e400", "99999999999999999999999", "NaN", "1E-400"]
    number = draw(st.sampled_from(huge))
    if number:
        text = text.replace(f"{NOW - 5}", number, 1)
    data = text.encode()
    if draw(st.booleans()):
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.sampled_from([b"\x00", b"\xff", b"\xc3(", b"\xed\xa0\x80"])) + data[pos:]
    return data


@st.composite
def wrapped(draw: st.DrawFn) -> bytes:
    """An event inside a replay wrapper or a shipper's envelope (both are JSON around a line)."""
    inner = draw(events() | st.binary(max_size=64))
    text = inner.decode("utf-8", "replace")
    shape = draw(st.sampled_from(["replay", "replay_b64", "vector", "filebeat", "fluentbit"]))
    if shape == "replay":
        return _dumps({"preagg_replay": draw(st.sampled_from(["late", "schema"])), "raw": text})
    if shape == "replay_b64":
        return b'{"preagg_replay":"late","raw_b64":"' + draw(st.binary(max_size=40)).hex().encode() + b'"}'
    if shape == "vector":
        return _dumps({"message": text, "timestamp": draw(json_values), "host": draw(json_values)})
    if shape == "filebeat":
        return _dumps({"@timestamp": draw(json_values), "message": text, "log": draw(json_values)})
    return _dumps({"log": text, "date": draw(json_values)})


def _dumps(obj: object) -> bytes:
    """JSON as a careless producer writes it: big integers, NaN and lone surrogates kept."""
    return json.dumps(obj).encode()


hostile = st.one_of(st.binary(max_size=200), events(), wrapped())


def _accepts_or_rejects(decode: Decode, raw: bytes) -> None:
    got = decode(raw)
    if isinstance(got, Rejection):
        assert got.reason and got.detail
        assert got.raw == raw or raw.startswith(b'{"preagg_replay":')
    else:
        assert isinstance(got, tuple)


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile)
def test_any_bytes_decode_or_reject(name: str, raw: bytes) -> None:
    _accepts_or_rejects(DECODERS[name], raw)


def test_deep_schema_invalid_event_is_a_depth_dead_letter() -> None:
    """The issue's 1.9 KB event: schema-invalid and nested 300 deep (it crash-looped workers)."""
    deep = "[" * 300 + "]" * 300
    raw = f'{{"site":"x","page":"/p","ts":1,"props":{{"a":{deep}}}}}'.encode()
    shipped = _dumps({"message": raw.decode(), "host": "h"})
    for fmt, line in (("event", raw), ("auto", raw), ("vector", shipped)):
        got = HitDecoder(1 << 20, 300, clock=lambda: NOW, fmt=fmt).decode(line)
        assert isinstance(got, Rejection) and got.reason == "depth", (fmt, got)
    got = ListenDecoder(1 << 20, 300, clock=lambda: NOW).decode(
        f'{{"user":1,"tag":2,"song":3,"ts":1,"x":{deep}}}'.encode()
    )
    assert isinstance(got, Rejection) and got.reason == "depth"


def test_depth_limit_admits_ordinary_nesting() -> None:
    shallow = "[" * (MAX_DEPTH - 3) + "]" * (MAX_DEPTH - 3)
    got = HitDecoder(1 << 20, 300, clock=lambda: NOW).decode(
        f'{{"site":"x","page":"/p","ts":{NOW},"extra":{shallow}}}'.encode()
    )
    assert not isinstance(got, Rejection), got


class _Exploding:
    """An aggregator whose decoder raises: the batch's last line of defence."""

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        raise RuntimeError("decoder bug")

    def __len__(self) -> int:
        return 0

    def documents(self) -> int:
        return 0

    def plan(self) -> list[Any]:
        return []


def test_a_raising_decoder_becomes_a_dead_letter_not_a_crash() -> None:
    batch = new_batch(_Exploding)
    batch.ingest_message(("hits", 0), 7, [b'{"x":1}'], ack=None, start=0)
    assert [(d.rejection.reason, d.offset) for d in batch.dead] == [("decoder", 7)]
    assert "RuntimeError" in batch.dead[0].rejection.detail
