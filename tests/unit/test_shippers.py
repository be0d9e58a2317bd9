"""Input formats: log-shipper envelopes, bare access-log lines, detection, site mapping, rejections."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from pipeline.core.rejection import Rejection
from pipeline.core.shippers import SHIPPERS, Shipped, detect, envelope, open_message
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.settings import HitsSettings
from pipeline.kinds.hits.site_map import SiteMap, SiteMapError
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.settings import ListensSettings
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.settings import Settings, SettingsError

LINE = (
    '203.0.113.9 - - [17/May/2015:10:05:03 +0000] "GET /blog/tags/puppet?flav=rss20 HTTP/1.1" 200 14872 '
    '"-" "UniversalFeedParser/4.2-pre-314-svn +http://feedparser.org/"'
)
LINE_TS = datetime(2015, 5, 17, 10, 5, 3, tzinfo=UTC).timestamp()
NOW = 1_700_000_000.0
PAGE = "/blog/tags/puppet"  # the line's "/blog/tags/puppet?flav=rss20": queries dropped by default

# The shippers' default shapes, as their documentation shows them (docs/ingest.md).
VECTOR = {
    "file": "/var/log/apache2/access.log",
    "host": "web-1",
    "message": LINE,
    "source_type": "file",
    "timestamp": "2023-11-14T22:13:20.000000Z",
}
FILEBEAT = {
    "@timestamp": "2023-11-14T22:13:20.123Z",
    "@metadata": {"beat": "filebeat", "type": "_doc", "version": "8.15.0"},
    "log": {"offset": 1234, "file": {"path": "/var/log/nginx/blog.access.log"}},
    "message": LINE,
    "input": {"type": "filestream"},
    "host": {"name": "web-2"},
    "agent": {"type": "filebeat", "version": "8.15.0"},
    "ecs": {"version": "8.0.0"},
}
FLUENTBIT = {"@timestamp": 1700000000.123, "log": LINE}


def hits(fmt: str, sites: SiteMap | None = None, clf_props: bool = False) -> HitDecoder:
    return HitDecoder(16_384, 300.0, clock=lambda: NOW, fmt=fmt, sites=sites, clf_props=clf_props)


@pytest.mark.parametrize(
    ("shape", "obj", "host", "path", "ts"),
    [
        ("vector", VECTOR, "web-1", "/var/log/apache2/access.log", 1700000000.0),
        ("filebeat", FILEBEAT, "web-2", "/var/log/nginx/blog.access.log", 1700000000.123),
        ("fluentbit", FLUENTBIT, None, None, 1700000000.123),
    ],
)
def test_each_documented_envelope_opens_to_its_line(
    shape: str, obj: dict[str, object], host: str | None, path: str | None, ts: float
) -> None:
    raw = orjson.dumps(obj)
    for fmt in (shape, "auto"):
        got = open_message(raw, fmt)
        assert isinstance(got, Shipped)
        assert (got.line, got.host, got.path, got.source) == (LINE.encode(), host, path, shape)
        assert got.ts == pytest.approx(ts)
    assert detect(obj) == shape


def test_auto_tells_events_envelopes_and_bare_lines_apart() -> None:
    event = b'{"site": "s", "page": "/", "ts": 1700000000}'
    assert open_message(event, "auto") == {"site": "s", "page": "/", "ts": 1700000000}
    bare = open_message(LINE.encode(), "auto")
    assert isinstance(bare, Shipped) and bare.source == "line" and bare.ts is None
    assert detect({"message": "x", "timestamp": "2023-01-01T00:00:00Z"}) == "vector"  # source_type dropped
    assert detect({"@timestamp": "2023-01-01T00:00:00Z", "message": "x"}) == "filebeat"  # @metadata dropped


def test_time_comes_from_the_line_not_the_shipper() -> None:
    dec = hits("auto", SiteMap("shop.example"))
    for obj in (VECTOR, FILEBEAT, FLUENTBIT):
        assert dec.decode(orjson.dumps(obj)) == ("shop.example", PAGE, LINE_TS, ())
    assert hits("clf", SiteMap("shop.example")).decode(LINE.encode()) == (
        "shop.example",
        PAGE,
        LINE_TS,
        (),
    )


def test_shipper_time_fills_an_event_without_ts_and_never_overrides_one() -> None:
    inner = orjson.dumps({"site": "s", "page": "/p"}).decode()
    got = hits("vector").decode(envelope(inner, "vector", 1_650_000_000.5, "h", "/f"))
    assert got == ("s", "/p", 1_650_000_000.5, ())
    inner = orjson.dumps({"site": "s", "page": "/p", "ts": 1_600_000_000}).decode()
    assert hits("fluentbit").decode(envelope(inner, "fluentbit", 1_650_000_000.5, "h", "/f"))[2] == 1.6e9
    listen = orjson.dumps({"user": 1, "tag": "rock", "song": 2}).decode()
    dec = ListenDecoder(16_384, 300.0, clock=lambda: NOW, fmt="filebeat")
    assert dec.decode(envelope(listen, "filebeat", 1_650_000_000.0, "h", "/f")) == (1, "rock", 2, 1.65e9)


def test_site_from_host_file_table_or_fixed() -> None:
    by_host = SiteMap("", "host", ["web-*=shop.example"])
    assert hits("vector", by_host).decode(orjson.dumps(VECTOR))[0] == "shop.example"
    by_file = SiteMap("", "file", ["*/blog.access.log=blog.example", "*/access.log=www.example"])
    assert hits("filebeat", by_file).decode(orjson.dumps(FILEBEAT))[0] == "blog.example"
    assert hits("vector", by_file).decode(orjson.dumps(VECTOR))[0] == "www.example"
    # No table: the field's value is the site (a file: its name without extension).
    assert hits("filebeat", SiteMap("", "host")).decode(orjson.dumps(FILEBEAT))[0] == "web-2"
    assert hits("filebeat", SiteMap("", "file")).decode(orjson.dumps(FILEBEAT))[0] == "blog.access"
    # Unmatched: the fixed site, else a dead letter naming why.
    assert (
        hits("vector", SiteMap("fallback", "host", ["db-*=x"])).decode(orjson.dumps(VECTOR))[0] == "fallback"
    )
    got = hits("vector", SiteMap("", "host", ["db-*=x"])).decode(orjson.dumps(VECTOR))
    assert isinstance(got, Rejection) and got.reason == "site" and "'web-1'" in got.detail
    got = hits("clf").decode(LINE.encode())
    assert isinstance(got, Rejection) and got.reason == "site" and "PREAGG_HITS_SITE" in got.detail
    # An event's own site is kept; one without gets the map's.
    inner = orjson.dumps({"page": "/p", "ts": 1_600_000_000}).decode()
    assert hits("vector", by_host).decode(envelope(inner, "vector", 1.0, "web-9", "/f"))[0] == "shop.example"
    with pytest.raises(SiteMapError):
        SiteMap("", "host", ["no-equals-sign"])


def test_clf_props_setting_counts_line_properties() -> None:
    got = hits("clf", SiteMap("s"), clf_props=True).decode(LINE.encode())
    assert not isinstance(got, Rejection)
    assert dict(got[3]) == {"status": "200", "method": "GET", "referrer": "-", "agent": "Bot"}


@pytest.mark.parametrize(
    ("fmt", "raw", "reason"),
    [
        ("filebeat", b"not json at all", "invalid_json"),
        ("vector", b"[1, 2]", "envelope"),
        ("vector", orjson.dumps({"timestamp": "2023-01-01T00:00:00Z", "host": "h"}), "envelope"),
        ("filebeat", orjson.dumps({**FILEBEAT, "message": 42}), "envelope"),
        ("fluentbit", orjson.dumps({"@timestamp": 1.0}), "envelope"),
        ("fluentbit", orjson.dumps({**FLUENTBIT, "log": "GET / HTTP/1.1 200"}), "clf"),
        ("clf", b'1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET /x HTTP/1.1 200 1', "clf"),
        ("clf", b'1.2.3.4 - - [99/Foo/2015:10:05:03 +0000] "GET /x HTTP/1.1" 200 1', "clf"),
        ("auto", b"garbage line", "clf"),
        ("auto", b'{"site": "s"}', "schema"),
        ("event", b'"just a string"', "schema"),
        ("vector", orjson.dumps({**VECTOR, "message": '{"site": "s", "page": 5}'}), "schema"),
        ("vector", orjson.dumps({**VECTOR, "message": "{broken"}), "invalid_json"),
        ("filebeat", b"{" + b" " * 20_000 + b"}", "oversize"),
    ],
)
def test_every_malformed_variant_is_rejected_with_its_reason(fmt: str, raw: bytes, reason: str) -> None:
    got = hits(fmt, SiteMap("s")).decode(raw)
    assert isinstance(got, Rejection), got
    assert got.reason == reason, got.detail
    assert got.raw == raw  # the dead letter keeps the message line as sent


def test_kinds_without_log_lines_refuse_them() -> None:
    dec = ListenDecoder(16_384, 300.0, clock=lambda: NOW, fmt="vector")
    got = dec.decode(envelope(LINE, "vector", NOW, "h", "/f"))
    assert isinstance(got, Rejection) and got.reason == "format"
    rel = RelationDecoder(16_384, "auto")
    assert rel.decode(b'{"user": 1, "item": 2}') == (1, 2)
    assert isinstance(rel.decode(b"1,2"), Rejection)
    with pytest.raises(SettingsError, match="PREAGG_LISTENS_FORMAT=clf"):
        LISTENS.decoder(Settings(), ListensSettings(format="clf"))
    assert HITS.decoder(Settings(), HitsSettings(format="clf", site="s")).fmt == "clf"


def test_settings_read_from_the_environment() -> None:
    env = {
        "PREAGG_HITS_FORMAT": "filebeat",
        "PREAGG_HITS_SITE_FIELD": "host",
        "PREAGG_HITS_SITE_MAP": "web-*=shop.example, api-*=api.example",
        "PREAGG_LISTENS_FORMAT": "auto",
    }
    s = Settings.from_env(env)
    h = s.of(HITS)
    assert (h.format, h.site_field, h.site_map) == (
        "filebeat",
        "host",
        ("web-*=shop.example", "api-*=api.example"),
    )
    assert s.of(LISTENS).format == "auto"
    with pytest.raises(SettingsError, match="PREAGG_HITS_FORMAT"):
        Settings.from_env({"PREAGG_HITS_FORMAT": "syslog"}).of(HITS)


@pytest.mark.parametrize("shipper", SHIPPERS)
def test_replayed_envelopes_round_trip(shipper: str) -> None:
    raw = envelope(LINE, shipper, 1_700_000_000.25, "web-1", "/var/log/a.log")
    got = open_message(raw, "auto")
    assert isinstance(got, Shipped) and got.source == shipper and got.line == LINE.encode()
    assert got.ts == pytest.approx(1_700_000_000.25, abs=1e-3)
