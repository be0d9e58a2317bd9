"""Keys of custom property counters: name-store tokens (compact) or escaped text (readable).

A hit's property ``name = value`` on a site is counted at ``props.<name key>.<value
key>`` of its daily document. Sites with properties are registered first (namespace
``s``, limit ``props_max_sites``: a site past it counts its properties under ``other``
and creates no namespace), names per site (namespace ``n/<site>``), values per site
and name (``v/<site>/<name>``), each namespace within its limit;
past it the key is ``other`` (``%other`` in readable mode, where ``other`` could be a
real name). Readable mode registers names too, so the limits hold in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from pipeline.core.fields import FieldMode
from pipeline.store.names.cache import NameCache
from pipeline.store.names.layout import OTHER, READABLE_OTHER, escape_key, names_namespace, values_namespace

Pair = tuple[str, str]


#: The namespace of the sites whose properties are counted.
SITES = "s"


def namespace_limit(max_names: int, max_values: int, max_sites: int = 10_000) -> Callable[[str], int]:
    """Limit of a namespace: sites, a site's names, or one property's values."""

    def limit(namespace: str) -> int:
        if namespace == SITES:
            return max_sites
        return max_names if namespace.startswith("n/") else max_values

    return limit


class PropKeys:
    """Resolves a flush's property names and values, then renders their counter keys."""

    def __init__(self, cache: NameCache, mode: FieldMode) -> None:
        self.cache = cache
        self.compact = mode == "compact"

    async def resolve(self, pairs_by_site: Mapping[str, Collection[Pair]]) -> None:
        """Tokens for every (name, value) of the flush: names first, then values of the names admitted.

        Values' namespaces are read with the names (one round trip when nothing is
        cached); a name past its limit registers no values.
        """
        self.cache.trim(keep=[SITES, *map(names_namespace, pairs_by_site)])
        await self.cache.resolve({SITES: set(pairs_by_site)})
        pairs_by_site = {s: p for s, p in pairs_by_site.items() if self.cache.token(SITES, s) != OTHER}
        names: dict[str, set[str]] = {}
        values: dict[str, set[str]] = {}
        for site, pairs in pairs_by_site.items():
            ns = names.setdefault(names_namespace(site), set())
            for name, value in pairs:
                ns.add(name)
                values.setdefault(values_namespace(site, name), set()).add(value)
        self.cache.trim(keep=[SITES, *names, *values])
        await self.cache.resolve(names, prefetch=values.keys())
        refused = {
            values_namespace(site, name)
            for site, pairs in pairs_by_site.items()
            for name, _ in pairs
            if self.cache.token(names_namespace(site), name) == OTHER
        }
        self.cache.forget(refused)  # read ahead with the names, never to be used
        admitted = {ns: vals for ns, vals in values.items() if ns not in refused}
        await self.cache.resolve(admitted, follow_up=True)

    def keys(self, site: str, name: str, value: str) -> Pair:
        """The (name, value) keys of a resolved pair's counter."""
        other = OTHER if self.compact else READABLE_OTHER
        if self.cache.token(SITES, site) == OTHER:
            return other, other
        name_token = self.cache.token(names_namespace(site), name)
        if name_token == OTHER:
            return other, other
        value_token = self.cache.token(values_namespace(site, name), value)
        if self.compact:
            return name_token, value_token
        return escape_key(name), other if value_token == OTHER else escape_key(value)
