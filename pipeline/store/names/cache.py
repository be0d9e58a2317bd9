"""A worker's token cache over the name store: bulk read-through, bulk registration, limits, LRU.

Tokens never change, so a worker keeps the tokens it has seen, up to ``max_namespaces``
namespaces (least recently used ones are dropped between flushes and read again when
needed). Names it does not know are resolved together: one read of all their
namespaces, one bulk write registering every new name (creating the documents of new
namespaces with their names in them), one read back; only names a race left without
a token are registered one namespace at a time. So a flush costs a handful of round
trips whatever number of new namespaces it brings (it was two per namespace: 100 new
sites with 32 properties each held a flush for 56 s). A steady stream of known names
costs no round trip; a namespace at its limit is final, so its unknown names map to
:data:`~pipeline.store.names.layout.OTHER` without a read.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pipeline.store.names.layout import OTHER, Namespace, plan_registration
from pipeline.store.names.store import NameStore, NameStoreContention, read_namespaces

log = logging.getLogger(__name__)

#: Failed appends in a row, with no other worker's progress in between, before
#: giving up this flush (the flusher retries it; tokens already given stay valid).
MAX_ATTEMPTS = 100


class NameCache:
    """Tokens of names per namespace, as strings ready for a field path."""

    def __init__(
        self, store: NameStore, limit: Callable[[str], int], doc_cap: int, max_namespaces: int = 20_000
    ) -> None:
        self.store = store
        self.limit = limit
        self.doc_cap = doc_cap
        #: Namespaces kept between flushes (least recently used dropped first, see :meth:`trim`).
        self.max_namespaces = max_namespaces
        self.spaces: OrderedDict[str, Namespace] = OrderedDict()
        #: Namespaces dropped from the cache so far (a metric).
        self.evicted = 0
        #: Names given :data:`OTHER`, counted once per resolve they appear in (a metric).
        self.overflow_names = 0
        #: Namespaces whose limit was already logged.
        self.warned: set[str] = set()
        #: Namespaces the last :meth:`resolve` read from the store.
        self._just_read: set[str] = set()

    def token(self, namespace: str, name: str) -> str:
        """The token of a resolved name (``OTHER`` past the limit)."""
        ns = self.spaces.get(namespace)
        if ns is not None and (tok := ns.tokens.get(name)) is not None:
            return str(tok)
        return OTHER

    def missing(self, wanted: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
        """Names without a token whose namespace may still take them."""
        out: dict[str, set[str]] = {}
        for namespace, names in wanted.items():
            ns = self.spaces.get(namespace)
            known = ns.tokens if ns is not None else {}
            unknown = {n for n in names if n not in known}
            if not unknown:
                continue
            if ns is not None and ns.full(self.limit(namespace)):
                self._overflow(namespace, unknown)
                continue
            out[namespace] = unknown
        return out

    async def resolve(
        self,
        wanted: Mapping[str, Collection[str]],
        prefetch: Collection[str] = (),
        follow_up: bool = False,
    ) -> None:
        """Give every wanted name a token (or ``OTHER``): one bulk read, appends only for new names.

        ``prefetch`` namespaces are read in the same round trip. With ``follow_up``,
        namespaces the previous call read count as current: a follow-up resolve of
        prefetched namespaces then costs no read.
        """
        todo = self.missing(wanted)
        fresh = self._just_read if follow_up else set()
        self._just_read = set()
        if not todo:
            return
        to_read = {*(ns for ns in todo if ns not in fresh), *(p for p in prefetch if p not in self.spaces)}
        if to_read:
            await self._read(to_read)
            self._just_read = to_read
        await self._register_bulk(todo)
        for namespace in todo:
            names = todo[namespace] - self.spaces[namespace].tokens.keys()
            if names:
                await self._register(namespace, names)

    async def _register_bulk(self, todo: Mapping[str, set[str]]) -> None:
        """One bulk write for every namespace's new names, then one read back of those namespaces."""
        writes = []
        for namespace, wanted in todo.items():
            ns = self.spaces[namespace]
            names = set(wanted) - ns.tokens.keys()
            limit = self.limit(namespace)
            if names and ns.full(limit):
                self._overflow(namespace, names)
                continue
            w = plan_registration(ns, names, limit, self.doc_cap)
            if w is not None:
                writes.append(w)
        if writes:
            await self.store.register(writes)
            await self._read({w.namespace for w in writes})

    def trim(self, keep: Collection[str] = ()) -> None:
        """Drop least recently used namespaces beyond ``max_namespaces``, never one of ``keep``.

        Called between flushes (a flush's namespaces must stay until its keys are made).
        """
        for namespace in keep:
            if namespace in self.spaces:
                self.spaces.move_to_end(namespace)
        kept = set(keep)
        while len(self.spaces) > self.max_namespaces:
            oldest = next(iter(self.spaces))
            if oldest in kept:
                break  # everything older was dropped; the rest is this flush's
            del self.spaces[oldest]
            self.evicted += 1

    async def _read(self, namespaces: Collection[str]) -> None:
        """Take what the store holds, unless this cache holds more of a namespace already.

        Namespaces only grow. The two families' flushers of a worker share this cache and
        their resolves interleave at their awaits: a read taken before the other's append and
        answered after it is older than what the cache holds, and would take that name back
        (counted as ``OTHER`` by the flush that had just resolved it)."""
        for name, ns in (await read_namespaces(self.store, namespaces)).items():
            held = self.spaces.get(name)
            if held is None or ns.size >= held.size:
                self.spaces[name] = ns

    async def _register(self, namespace: str, names: set[str]) -> None:
        limit = self.limit(namespace)
        stalls = 0  # failed appends after which the namespace had not grown
        while stalls < MAX_ATTEMPTS:
            ns = self.spaces[namespace]
            names -= ns.tokens.keys()
            if not names:
                return
            if ns.full(limit):
                self._overflow(namespace, names)
                return
            room = ns.room(limit)
            if room == 0:  # the last document is full (or there is none): start the next one
                seq, least, cap = ns.next_doc(self.doc_cap, limit)
                self._learn_last(ns, await self.store.create(namespace, seq, least, cap))
                continue
            batch = sorted(names)[:room]
            appended = await self.store.append(namespace, ns.seq, min(ns.cap, limit - ns.least), batch)
            if appended is not None:
                self._learn_last(ns, appended)
            else:  # another worker appended first: read what it wrote, then retry
                before = ns.size
                await self._read([namespace])
                stalls = stalls + 1 if self.spaces[namespace].size == before else 0
        raise NameStoreContention(f"name store: namespace {namespace!r} kept changing")

    def _learn_last(self, ns: Namespace, doc: Mapping[str, Any]) -> None:
        """Take positions from a (new or appended) last document returned by the store."""
        if int(str(doc["_id"]).rsplit("|", 1)[1]) >= ns.seq:
            ns.absorb(doc, self.store.f)

    def forget(self, namespaces: Collection[str]) -> None:
        """Drop namespaces from the cache (read ahead but not needed: keeps memory bounded)."""
        for namespace in namespaces:
            self.spaces.pop(namespace, None)

    def _overflow(self, namespace: str, names: Collection[str]) -> None:
        # Counted, not remembered: a producer sending unbounded names must not grow memory.
        if namespace not in self.warned:
            self.warned.add(namespace)
            log.warning(
                "name store: namespace %r is at its limit of %d names; new names count as %r",
                namespace,
                self.limit(namespace),
                OTHER,
            )
        self.overflow_names += len(names)
