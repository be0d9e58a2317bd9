"""The unit a flush writes: one upsert of one document, all its increments combined."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(slots=True)
class DocUpdate:
    """Upsert of ``id`` in ``collection``: ``$inc``, ``$bit or``, ``$set`` and ``$setOnInsert`` parts."""

    collection: str
    id: int | str
    set_on_insert: dict[str, Any]
    inc: dict[str, int] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    #: Dotted path → signed int64 mask to OR in (Bloom filter words).
    bit_or: dict[str, int] = field(default_factory=dict)
    #: Read-modify-write: given the stored document (``None`` if absent), the fields
    #: to ``$set``. The sink reads the documents inside the flush's transaction, then runs
    #: the computes in the order of the plan (a compute may use what earlier ones found).
    compute: Callable[[dict[str, Any] | None], dict[str, Any]] | None = None
    #: Equalities the filter carries besides ``_id``: the collection's shard key (an upsert
    #: on a sharded collection needs all of it; on insert MongoDB copies them into the document).
    key: dict[str, Any] = field(default_factory=dict)
    #: The source partitions whose events this update carries ``(topic, partition)``: with
    #: idempotent writes (docs/exactly-once.md) the document remembers, per partition, the
    #: last flush sequence applied, and the update's filter skips a document already holding it.
    sources: tuple[tuple[str, int], ...] = ()
    #: Which upsert of a document split by :func:`split_wide` this is (each is marked apart).
    part: int = 0
    #: Dotted path → value to ``$max`` in (a "last written" stamp: mergeable, unlike ``$set``).
    max: dict[str, Any] = field(default_factory=dict)
    #: Sent as an insert of :func:`new_document`: a read-modify-write that found no
    #: document inside its transaction (an upsert costs the embedded store 5.5 times an
    #: insert; on MongoDB it adds the query phase). A document inserted meanwhile by
    #: another transaction makes this one fail and be retried, as a write conflict would.
    insert: bool = False
    #: A merged update (:func:`merge_sources`): the per-partition updates it adds up, so that
    #: a source whose share a document already holds can be left out and the others sent apart.
    shares: tuple[DocUpdate, ...] = ()
    #: Dotted path → values to add to the array there as a set (``$addToSet`` with ``$each``:
    #: a set union, idempotent and commutative; a visitor sketch's explicit hashes).
    add_to_set: dict[str, list[Any]] = field(default_factory=dict)
    #: Written, and acknowledged, before the flush's other statements: a document that another
    #: statement of the flush points to (a visitor sketch's registers, which their holder lists
    #: in ``w``), so that a reader finding the pointer finds the document
    #: (:mod:`pipeline.kinds.hits.sites.fold`).
    before: bool = False
    #: The compute's fields are its one source partition's own: no other partition's update
    #: writes them (a partition's visitor registers). Several partitions' such updates of one
    #: document merge (:func:`merge_sources`), each share keeping its compute.
    owned: bool = False

    @property
    def merging(self) -> bool:
        """Whether it merges into stored values (``$inc``, ``$bit or``, ``$max``): never a plain insert."""
        return bool(self.inc or self.bit_or or self.max or self.add_to_set)

    def filter(self) -> dict[str, Any]:
        """The upsert's filter: ``_id`` and the shard key's equalities."""
        return {"_id": self.id, **self.key} if self.key else {"_id": self.id}

    def add(self, path: str, n: int) -> None:
        """Add ``n`` to counter ``path`` (dotted) of this update."""
        self.inc[path] = self.inc.get(path, 0) + n


def get_path(doc: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``doc`` (``None`` where a part is missing or not a document)."""
    for part in path.split("."):
        doc = doc.get(part) if isinstance(doc, dict) else None
    return doc


def put_path(doc: dict[str, Any], path: str, value: Any) -> bool:
    """Set dotted ``path`` in ``doc`` as ``$set`` does, creating the parent documents;
    whether it held a value before. A parent that is not a document is a ``ValueError``."""
    if "." not in path:  # the common case, without splitting
        had = path in doc
        doc[path] = value
        return had
    *parents, last = path.split(".")
    at = doc
    for part in parents:
        at = at.setdefault(part, {})
        if not isinstance(at, dict):
            raise ValueError(f"{path}: {part} is not a document")
    had = last in at
    at[last] = value
    return had


def new_document(u: DocUpdate) -> dict[str, Any]:
    """The document the upsert of ``u`` would create: ``_id``, the filter's equalities,
    ``$setOnInsert`` and ``$set`` (dotted paths as embedded documents). Only for updates
    that do not merge (:attr:`DocUpdate.merging`)."""
    if u.merging:
        raise ValueError("an update with $inc, $bit or $max is not a new document")
    doc: dict[str, Any] = {"_id": u.id, **u.key}
    for path, value in (*u.set_on_insert.items(), *u.set.items()):
        if put_path(doc, path, value):
            raise ValueError(f"{path}: set twice")
    return doc


def key_on_insert(u: DocUpdate) -> DocUpdate:
    """``u`` with its shard-key equalities set on insert instead of matched: for a deployment
    whose collections are not sharded (the ``_id`` alone names the document).

    The filter is then ``_id`` (and the marks), so the only index that can answer it is
    ``_id``'s: MongoDB plans it without racing the (site, page, date) index against it, and the
    embedded store's upserts cost 19% less (docs/benchmarks.md, "The store's cost per
    document"). The stored document is the same: an upsert copies the filter's equalities
    into the document it inserts, as ``$setOnInsert`` does.
    """
    if not u.key:
        return u
    return replace(
        u,
        set_on_insert={**u.key, **u.set_on_insert},
        key={},
        shares=tuple(key_on_insert(s) for s in u.shares),
    )


def width(u: DocUpdate) -> int:
    """Paths an update merges into its document that :func:`split_wide` spreads: counters, ``$bit``
    and ``$addToSet`` paths. ``$max`` paths (a "written" stamp, sketches' overflow marks: a
    few) stay in the first part, as before sketches: a counters-only update splits as it did."""
    return len(u.inc) + len(u.bit_or) + len(u.add_to_set)


def split_wide(updates: list[DocUpdate], max_fields: int) -> list[DocUpdate]:
    """Split updates merging more than ``max_fields`` fields into several upserts of the same document.

    ``0`` never splits (one upsert per document). Backfills produce wide counter updates,
    and a busy holder of unique visitors wide ``$max``/``$bit`` ones (docs/visitors.md);
    splitting them helps stores whose update cost grows faster than the number of fields
    (SecantusDB: see docs/benchmarks.md). Each part is marked apart (``part``): all are
    idempotent, so a part applied twice changes nothing. Every part carries the whole
    ``$setOnInsert`` (the metadata): another writer's part 2 may insert the document before
    this part 0 arrives as an update, and a document inserted without its date was missing
    from every query that filters on it, for good.
    """
    if max_fields <= 0 or all(width(u) <= max_fields for u in updates):
        return updates
    out: list[DocUpdate] = []
    for u in updates:
        if width(u) <= max_fields:
            out.append(u)
            continue
        items: list[tuple[str, str, Any]] = [
            *(("inc", k, v) for k, v in u.inc.items()),
            *(("bit_or", k, v) for k, v in u.bit_or.items()),
            *(("add_to_set", k, v) for k, v in u.add_to_set.items()),
        ]
        for i in range(0, len(items), max_fields):
            first = i == 0
            chunk = items[i : i + max_fields]
            out.append(
                DocUpdate(
                    u.collection,
                    u.id,
                    dict(u.set_on_insert),  # every part: whichever inserts the document, it is whole
                    {k: v for op, k, v in chunk if op == "inc"},
                    u.set if first else {},
                    {k: v for op, k, v in chunk if op == "bit_or"},
                    u.compute if first else None,
                    u.key,
                    u.sources,
                    i // max_fields,
                    u.max if first else {},
                    add_to_set={k: v for op, k, v in chunk if op == "add_to_set"},
                    before=u.before,
                    owned=u.owned and first,
                )
            )
    return out


def mergeable(u: DocUpdate) -> bool:
    """Can another partition's update of the same document be added into this one?"""
    return (u.compute is None or u.owned) and not u.set


def _merged(shares: list[DocUpdate]) -> DocUpdate:
    """Several partitions' updates of one document added up into one (:func:`merge_sources`)."""
    u = shares[0]
    m = DocUpdate(
        u.collection,
        u.id,
        dict(u.set_on_insert),
        dict(u.inc),
        bit_or=dict(u.bit_or),
        key=u.key,
        max=dict(u.max),
        add_to_set={k: list(v) for k, v in u.add_to_set.items()},
        before=u.before,
    )
    inc, bit_or, max_ = m.inc, m.bit_or, m.max
    sources = dict.fromkeys(u.sources)
    for u in shares[1:]:
        for path, n in u.inc.items():
            inc[path] = inc.get(path, 0) + n
        for path, mask in u.bit_or.items():
            bit_or[path] = bit_or.get(path, 0) | mask  # signed int64 OR signed int64: in range
        for path, v in u.set_on_insert.items():
            m.set_on_insert.setdefault(path, v)
        for path, v in u.max.items():
            max_[path] = max(max_[path], v) if path in max_ else v
        for path, values in u.add_to_set.items():
            m.add_to_set[path] = [*m.add_to_set.get(path, ()), *values]
        sources.update(dict.fromkeys(u.sources))
    for path, values in m.add_to_set.items():
        m.add_to_set[path] = _union(values)
    m.sources = tuple(sources)
    m.shares = tuple(shares)
    computes = [s.compute for s in shares if s.compute is not None]
    if computes:
        m.compute, m.owned = _all_of(computes), True
    return m


def _union(values: list[Any]) -> list[Any]:
    """A merged ``$addToSet``'s elements: each once; elements of a type that stands for a set
    (a ``union_element`` class method, such as :class:`~pipeline.core.uniques.PackedInts`:
    readers take the union of a path's elements) as one element, their union."""
    kinds = {type(v) for v in values}
    if len(values) > 1 and len(kinds) == 1:
        union = getattr(next(iter(kinds)), "union_element", None)
        if union is not None:
            return [union(values)]
    return list(dict.fromkeys(values))


def _all_of(
    computes: list[Callable[[dict[str, Any] | None], dict[str, Any]]],
) -> Callable[[dict[str, Any] | None], dict[str, Any]]:
    """The partitions' computes of one merged update: each sets its own fields."""

    def compute(found: dict[str, Any] | None) -> dict[str, Any]:
        return disjoint_fields(c(found) for c in computes)

    return compute


def disjoint_fields(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The fields of several partitions' read-modify-writes of one document, which set fields
    apart (each its own); the same field twice is a ``ValueError``, never a silent pick."""
    out: dict[str, Any] = {}
    for fields in parts:
        if out.keys() & fields.keys():
            raise ValueError(f"partitions' computes both set {sorted(out.keys() & fields.keys())}")
        out.update(fields)
    return out


def merge_sources(updates: list[DocUpdate], max_fields: int = 0) -> list[DocUpdate]:
    """One update per document: the same document's updates from several partitions added up.

    Counters add, bit masks OR, ``$setOnInsert`` values (the same for one document) are
    kept once, read-modify-writes of fields each partition owns run side by side, and the
    sources are the union. An update that cannot be added (another read-modify-write, a
    ``$set``) stays apart. Keyless streams touch a document from
    every partition in one flush: this keeps it at one write.

    A merged update wider than ``max_fields`` (when not 0) is left as its partitions'
    updates: :func:`split_wide` then splits each alone, so that a partition's range
    written again alone (by its next owner) splits into the same parts.
    """
    # The same document's updates, in the order of their first; a document of one source
    # (every document of a keyed stream) is its update, not a copy.
    slots: list[DocUpdate | list[DocUpdate]] = []
    groups: dict[tuple[str, int | str], list[DocUpdate]] = {}
    for u in updates:
        if not mergeable(u):
            slots.append(u)
            continue
        k = (u.collection, u.id)
        g = groups.get(k)
        if g is None:
            g = groups[k] = [u]
            slots.append(g)
        else:
            g.append(u)
    out = [s if isinstance(s, DocUpdate) else s[0] if len(s) == 1 else _merged(s) for s in slots]
    if max_fields <= 0:
        return out
    wide = {id(m) for m in out if len(m.sources) > 1 and width(m) > max_fields}
    if not wide:
        return out
    apart = {(m.collection, m.id) for m in out if id(m) in wide}
    kept = [m for m in out if id(m) not in wide]
    return kept + [u for u in updates if mergeable(u) and (u.collection, u.id) in apart]
