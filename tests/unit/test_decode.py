import orjson

from pipeline.core.envelope import pack, unpack
from pipeline.core.rejection import Rejection
from pipeline.kinds.hits.decode import HitDecoder

NOW = 1_700_000_000.0


def dec(max_bytes: int = 1000) -> HitDecoder:
    return HitDecoder(max_bytes, future_skew=300, clock=lambda: NOW)


def reason(raw: bytes) -> str:
    r = dec().decode(raw)
    assert isinstance(r, Rejection), r
    assert r.raw == raw
    return r.reason


def test_valid_hit() -> None:
    assert dec().decode(b'{"site":"s","page":"/p","ts":1.5,"extra":1}') == ("s", "/p", 1.5, ())
    assert dec().decode('{"site":"ü","page":"/ä b","ts":"2020-01-01T00:00:00Z"}'.encode()) == (
        "ü",
        "/ä b",
        1577836800.0,
        (),
    )


def test_rejections_have_reasons() -> None:
    assert reason(b"{nope") == "invalid_json"
    assert reason(b'{"site":"s","ts":1}') == "schema"
    assert reason(b'{"site":"","page":"/","ts":1}') == "schema"
    assert reason(b'{"site":1,"page":"/","ts":1}') == "schema"
    assert reason(b"[1,2]") == "schema"
    assert reason(b'{"site":"s","page":"/","ts":"2020-01-01T00:00:00"}') == "bad_time"
    assert reason(b'{"site":"s","page":"/","ts":"not a time at all"}') == "bad_time"
    assert reason(orjson.dumps({"site": "s", "page": "/", "ts": NOW + 301})) == "future"
    assert reason(b'{"site":"s","page":"/' + b"x" * 2000 + b'","ts":1}') == "oversize"


def test_schema_error_names_the_field() -> None:
    r = dec().decode(b'{"site":1,"page":"/","ts":1}')
    assert isinstance(r, Rejection) and "site" in r.detail


def test_envelope_round_trip_skips_blank_lines() -> None:
    lines = [b'{"a":1}', b'{"b":2}']
    assert list(unpack(pack(lines))) == lines
    assert list(unpack(b'{"a":1}\n')) == [b'{"a":1}']
    assert list(unpack(b"")) == []
