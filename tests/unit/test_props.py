"""Custom properties: decoding limits, counting, counter keys, and the name store's rules (no servers)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pipeline.core.rejection import Rejection
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.clf import agent_family, clf_props, parse_line
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.props import PropKeys, namespace_limit
from pipeline.store.names.cache import NameCache
from pipeline.store.names.layout import (
    OTHER,
    READABLE_OTHER,
    Namespace,
    doc_id,
    escape_key,
    learn,
    names_namespace,
    unescape_key,
    values_namespace,
)
from pipeline.store.names.store import names_fields

T = datetime(2020, 3, 1, 12, 30, tzinfo=UTC).timestamp()


def dec(max_props: int = 4, max_bytes: int = 8) -> HitDecoder:
    return HitDecoder(1000, 300, clock=lambda: 2e9, max_props=max_props, max_prop_bytes=max_bytes)


def hit(props: str) -> bytes:
    return b'{"site":"s","page":"/","ts":%f,"props":%s}' % (T, props.encode())


def test_props_decode_as_text_pairs() -> None:
    got = dec().decode(hit('{"country":"DE","code":404,"new":true}'))
    assert got == ("s", "/", T, (("country", "DE"), ("code", "404"), ("new", "true")))
    assert dec().decode(hit("{}")) == ("s", "/", T, ())


def test_props_over_the_limits_are_rejected_with_reason() -> None:
    for bad in ('{"a":"1","b":"2","c":"3","d":"4","e":"5"}', '{"country":"123456789"}', '{"123456789":"x"}'):
        r = dec().decode(hit(bad))
        assert isinstance(r, Rejection) and r.reason == "props", bad
    for bad in ('{"a":{"nested":1}}', '{"a":[1]}', '{"":"x"}', '{"a":null}'):
        r = dec().decode(hit(bad))
        assert isinstance(r, Rejection) and r.reason == "schema", bad
    # multibyte: 3 characters of 3 bytes = 9 bytes > 8
    r = dec().decode(hit('{"c":"日本語"}'))
    assert isinstance(r, Rejection) and r.reason == "props"


class DictKeys:
    """Counter keys from fixed dictionaries: the planner's view of a resolved name store."""

    def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
        return {"country": "0", "device": "1"}.get(name, OTHER), {"DE": "0", "FR": "1"}.get(value, OTHER)


def test_props_are_counted_in_the_daily_document_only() -> None:
    agg = HitCounts(dec(), hits_fields("compact"), DictKeys())
    for props in ('{"country":"DE"}', '{"country":"DE","device":"x"}', '{"country":"FR"}', '{"zzz":"DE"}'):
        assert agg.ingest(hit(props)) is None
    assert agg.prop_pairs() == {"s": {("country", "DE"), ("device", "x"), ("country", "FR"), ("zzz", "DE")}}
    plan = {u.id: u for u in agg.plan()}
    daily = plan["20200301/s//"]
    assert daily.inc["t"] == 4
    assert {k: v for k, v in daily.inc.items() if k.startswith("x.")} == {
        "x.0.0": 2,
        "x.0.1": 1,
        "x.1.other": 1,
        "x.other.0": 1,
    }
    assert not any(k.startswith("x.") for k in plan["202003/s//"].inc)
    assert len(agg) == 1 + 4


def test_clf_lines_yield_the_four_properties() -> None:
    line = (
        '83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /a HTTP/1.1" 200 203 '
        '"http://semicomplete.com/presentations/" "Mozilla/5.0 (X11) Chrome/32.0 Safari/537.36"'
    )
    assert clf_props(parse_line(line)) == {
        "status": "200",
        "method": "GET",
        "referrer": "semicomplete.com",
        "agent": "Chrome",
    }
    assert agent_family("Googlebot/2.1 (+http://www.google.com/bot.html)") == "Bot"
    assert agent_family("-") == "-" and agent_family("Lynx") == "Other"


def test_readable_keys_escape_and_round_trip() -> None:
    for text in ["a.b", "$x", "100%", "%2E", "", "a\0b", "other", "%other"]:
        key = escape_key(text)
        assert "." not in key and not key.startswith("$") and "\0" not in key
        assert unescape_key(key) == text
        assert key != READABLE_OTHER
    assert names_namespace("a/b") != names_namespace("a%2Fb")
    assert values_namespace("a", "b/c") != values_namespace("a/b", "c")


def doc(ns: str, seq: int, least: int, cap: int, names: list[str]) -> dict[str, Any]:
    f = names_fields("readable")
    return {
        "_id": doc_id(ns, seq),
        f["namespace"]: ns,
        f["least_value"]: least,
        f["cap"]: cap,
        f["list"]: names,
    }


def test_learn_gives_positions_and_detects_torn_reads() -> None:
    f = names_fields("readable")
    ns = learn("n", [doc("n", 1, 2, 2, ["c"]), doc("n", 0, 0, 2, ["a", "b"])], f)
    assert ns is not None and ns.tokens == {"a": 0, "b": 1, "c": 2}
    assert (ns.seq, ns.least, ns.cap, ns.length, ns.size) == (1, 2, 2, 1, 3)
    # the first document read before it filled, the second after it appeared: torn
    assert learn("n", [doc("n", 0, 0, 2, ["a"]), doc("n", 1, 2, 2, ["c"])], f) is None
    assert learn("n", [], f) == Namespace("n")


def test_room_and_next_document_respect_cap_and_limit() -> None:
    ns = Namespace("n", seq=0, least=0, cap=4, length=3)
    assert ns.room(limit=100) == 1 and ns.room(limit=3) == 0 and ns.full(limit=3)
    ns.length = 4
    assert ns.next_doc(doc_cap=4, limit=6) == (1, 4, 2)
    assert Namespace("n").next_doc(doc_cap=4, limit=100) == (0, 0, 4)


class FakeStore:
    """The name store's three operations on a dict, with its guards (the cache's logic without a server)."""

    def __init__(self) -> None:
        self.f = names_fields("readable")
        self.docs: dict[str, dict[str, Any]] = {}
        self.reads = self.writes = 0

    async def read(self, namespaces: Any) -> dict[str, list[dict[str, Any]]]:
        self.reads += 1
        out: dict[str, list[dict[str, Any]]] = {ns: [] for ns in namespaces}
        for d in self.docs.values():
            if d["namespace"] in out:
                out[d["namespace"]].append({**d, "list": list(d["list"])})
        return out

    async def create(self, namespace: str, seq: int, least: int, cap: int) -> dict[str, Any]:
        self.writes += 1
        return self.docs.setdefault(doc_id(namespace, seq), doc(namespace, seq, least, cap, []))

    async def append(self, namespace: str, seq: int, bound: int, names: list[str]) -> dict[str, Any] | None:
        self.writes += 1
        return self._append(namespace, seq, bound, names)

    def _append(self, namespace: str, seq: int, bound: int, names: list[str]) -> dict[str, Any] | None:
        d = self.docs.get(doc_id(namespace, seq))
        if d is None or any(n in d["list"] for n in names) or len(d["list"]) > bound - len(names):
            return None
        d["list"].extend(names)
        return {**d, "list": list(d["list"])}

    async def register(self, writes: Any) -> None:
        """One bulk write: creates holding their names, guarded appends."""
        self.writes += 1
        for w in writes:
            if w.create:
                self.docs.setdefault(
                    doc_id(w.namespace, w.seq), doc(w.namespace, w.seq, w.least, w.cap, list(w.names))
                )
            else:
                self._append(w.namespace, w.seq, w.bound, list(w.names))


def test_cache_resolves_in_bulk_then_costs_no_round_trip() -> None:
    store = FakeStore()
    cache = NameCache(store, lambda ns: 5, doc_cap=2)  # type: ignore[arg-type]
    names = ["a", "b", "c", "d", "e", "f", "g"]
    asyncio.run(cache.resolve({"n": names}))
    tokens = {n: cache.token("n", n) for n in names}
    assert sorted(t for t in tokens.values() if t != OTHER) == ["0", "1", "2", "3", "4"]
    assert list(tokens.values()).count(OTHER) == 2 and cache.overflow_names == 2
    assert [len(d["list"]) for d in store.docs.values()] == [2, 2, 1]
    before = (store.reads, store.writes)
    asyncio.run(cache.resolve({"n": [*names, "new"]}))  # full namespace: final, no read
    assert (store.reads, store.writes) == before and cache.token("n", "new") == OTHER
    # a second worker starts cold: one read, no write, the same tokens
    other = NameCache(store, lambda ns: 5, doc_cap=2)  # type: ignore[arg-type]
    asyncio.run(other.resolve({"n": names}))
    assert {n: other.token("n", n) for n in names} == tokens
    assert (store.reads, store.writes) == (before[0] + 1, before[1])


def test_prop_keys_use_tokens_or_escaped_text_and_limit_values() -> None:
    for mode, want in (("compact", ("0", "1")), ("readable", ("c%2Eo", "D%24E"))):
        store = FakeStore()
        cache = NameCache(store, namespace_limit(10, 1), doc_cap=10)  # type: ignore[arg-type]
        keys = PropKeys(cache, mode)
        asyncio.run(keys.resolve({"s": {("c.o", "FR"), ("c.o", "D$E")}}))
        # cold: sites, then names and values read together, each registration one bulk write
        assert store.reads <= 5 and store.writes <= 3
        first = keys.keys("s", "c.o", "FR"), keys.keys("s", "c.o", "D$E")
        other = OTHER if mode == "compact" else READABLE_OTHER
        # one value admitted (limit 1), the other counted as other
        assert sorted(k[1] == other for k in first) == [False, True]
        if mode == "compact":
            assert {k[0] for k in first} == {"0"}
        else:
            assert {k[0] for k in first} == {want[0]}


def test_unbounded_names_past_the_limit_cost_no_memory_and_no_round_trips() -> None:
    """A producer sending a user id as a property name: counted as other, nothing kept per name."""
    store = FakeStore()
    keys = PropKeys(NameCache(store, namespace_limit(3, 10), doc_cap=10), "compact")  # type: ignore[arg-type]
    first = {("a", "1"), ("b", "1"), ("c", "1")} | {(f"user-x-{i}", "x") for i in range(500)}
    asyncio.run(keys.resolve({"s": first}))  # the limit is reached within this flush
    spaces, reads = len(keys.cache.spaces), store.reads
    assert spaces == 1 + 1 + 3  # the sites, the names, and the values of the three admitted names only
    for batch in range(20):
        pairs = {(f"user-{batch}-{i}", "x") for i in range(500)}
        asyncio.run(keys.resolve({"s": pairs | {("a", "1")}}))
        assert keys.keys("s", f"user-{batch}-0", "x") == (OTHER, OTHER)
    assert len(keys.cache.spaces) == spaces and store.reads == reads  # the names namespace is final
    assert keys.cache.overflow_names == 21 * 500
    assert keys.keys("s", "a", "1") == ("0", "0")


def test_no_daily_document_can_pass_16_mb_whatever_properties_arrive() -> None:
    """The worst case the limits allow, built as BSON: every name and value at its longest key."""
    import bson

    from pipeline.kinds.hits.budget import values_per_name, worst_props_bytes
    from pipeline.kinds.hits.settings import HitsSettings

    for s in (
        HitsSettings(),
        HitsSettings(props_max_names=1000),
        HitsSettings(props_max_names=10, props_max_bytes=64),
    ):
        for mode in ("compact", "readable"):
            values = values_per_name(s, mode)  # type: ignore[arg-type]
            assert 1 <= values <= s.props_max_values
            if mode == "compact":  # the tokens a full namespace holds

                def name_key(i: int) -> str:
                    return str(i)

                def value_key(j: int) -> str:
                    return str(j)
            else:  # the longest texts, every byte escaped to three

                def name_key(i: int, n: int = s.props_max_bytes) -> str:
                    return escape_key("." * (n - 4)) + f"{i:04d}"

                def value_key(j: int, n: int = s.props_max_bytes) -> str:
                    return escape_key("$" * (n - 5)) + f"{j:05d}"

            other = OTHER if mode == "compact" else READABLE_OTHER
            props = {
                name_key(i): {**{value_key(j): 2**40 for j in range(values)}, other: 2**40}
                for i in range(s.props_max_names)
            }
            props[other] = {other: 2**40}
            size = len(bson.encode({"x": props}))
            assert size <= worst_props_bytes(s, mode) + 16 <= s.props_max_doc_bytes + 1024, (mode, size)  # type: ignore[arg-type]
            assert size < 16 * 1024 * 1024 - 64 * 1024  # room for the minute and hour counters


def test_new_sites_with_many_properties_cost_a_bounded_number_of_round_trips() -> None:
    """100 new sites with 32 new names each: was 2 round trips per namespace (3,300 of them, 56 s)."""
    store = FakeStore()
    keys = PropKeys(NameCache(store, namespace_limit(100, 1000), doc_cap=1000), "compact")  # type: ignore[arg-type]
    pairs = {f"site-{i}": {(f"p{j}", f"v{i}") for j in range(32)} for i in range(100)}
    asyncio.run(keys.resolve(pairs))
    assert store.reads <= 5 and store.writes <= 3, (store.reads, store.writes)
    assert len(store.docs) == 1 + 100 + 100 * 32
    assert keys.keys("site-7", "p3", "v7") != (OTHER, OTHER)
    tokens = {keys.keys(s, n, v) for s, ps in pairs.items() for n, v in ps}
    assert OTHER not in {t for k in tokens for t in k}


def test_sites_past_their_limit_create_no_namespace() -> None:
    store = FakeStore()
    keys = PropKeys(NameCache(store, namespace_limit(100, 1000, max_sites=3), doc_cap=1000), "compact")  # type: ignore[arg-type]
    asyncio.run(keys.resolve({f"s{i}": {("country", "DE")} for i in range(10)}))
    counted = [i for i in range(10) if keys.keys(f"s{i}", "country", "DE") != (OTHER, OTHER)]
    assert len(counted) == 3
    assert len([d for d in store.docs.values() if d["namespace"].startswith("n/")]) == 3


def test_the_cache_keeps_at_most_its_size_of_namespaces_between_flushes() -> None:
    store = FakeStore()
    cache = NameCache(store, namespace_limit(100, 1000), doc_cap=1000, max_namespaces=50)  # type: ignore[arg-type]
    keys = PropKeys(cache, "compact")
    for batch in range(10):
        pairs = {f"site-{batch}-{i}": {("p", "v")} for i in range(20)}
        asyncio.run(keys.resolve(pairs))
        # every namespace of this flush is there for its keys, whatever the size
        assert all(keys.keys(s, "p", "v") != (OTHER, OTHER) for s in pairs)
    cache.trim()
    assert len(cache.spaces) <= 50 and cache.evicted > 0
    asyncio.run(keys.resolve({"site-0-0": {("p", "v")}}))  # evicted, read again: the same tokens
    assert keys.keys("site-0-0", "p", "v") == ("0", "0")


class SlowSecondRead(FakeStore):
    """A store whose second read is taken at once and answered only when let go."""

    def __init__(self) -> None:
        super().__init__()
        self.taken, self.go = asyncio.Event(), asyncio.Event()

    async def read(self, namespaces: Any) -> dict[str, list[dict[str, Any]]]:
        out = await super().read(namespaces)
        if self.reads == 2:
            self.taken.set()
            await self.go.wait()
        return out


def test_a_read_answered_late_never_takes_a_name_back_from_the_cache() -> None:
    """The two families' flushers of a worker share one cache, and their resolves interleave
    at their awaits: one's read taken before the other's append, answered after it, must not
    replace the namespace with its older state (the other's name would count as ``(other)``)."""

    async def main() -> tuple[str, str]:
        store = SlowSecondRead()
        cache = NameCache(store, lambda ns: 5, doc_cap=10)  # type: ignore[arg-type]
        first = asyncio.create_task(cache.resolve({"v/s/a": {"x"}}))  # its read back is late
        await store.taken.wait()
        await cache.resolve({"v/s/a": {"v"}})
        assert cache.token("v/s/a", "v") != OTHER
        store.go.set()
        await first
        return cache.token("v/s/a", "x"), cache.token("v/s/a", "v")

    x, v = asyncio.run(main())
    assert OTHER not in (x, v) and x != v
