"""Keys of custom property counters: name-store tokens (compact) or escaped text (readable).

A hit's property ``name = value`` on a site is counted at ``props.<name key>.<value
key>`` of its daily document. Names are registered per site (namespace ``n/<site>``),
values per site and name (``v/<site>/<name>``), each namespace within its limit;
past it the key is ``other`` (``%other`` in readable mode, where ``other`` could be a
real name). Readable mode registers names too, so the limits hold in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from pipeline.core.fields import FieldMode
from pipeline.store.names.cache import NameCache
from pipeline.store.names.layout import OTHER, READABLE_OTHER, escape_key, names_namespace, values_namespace

Pair = tuple[str, str]


def namespace_limit(max_names: int, max_values: int) -> Callable[[str], int]:
    """Limit of a namespace: ``max_names`` for a site's names, ``max_values`` for one property's values."""
    return lambda namespace: max_names if namespace.startswith("n/") else max_values


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
        names: dict[str, set[str]] = {}
        values: dict[str, set[str]] = {}
        for site, pairs in pairs_by_site.items():
            ns = names.setdefault(names_namespace(site), set())
            for name, value in pairs:
                ns.add(name)
                values.setdefault(values_namespace(site, name), set()).add(value)
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
        name_token = self.cache.token(names_namespace(site), name)
        if name_token == OTHER:
            return other, other
        value_token = self.cache.token(values_namespace(site, name), value)
        if self.compact:
            return name_token, value_token
        return escape_key(name), other if value_token == OTHER else escape_key(value)
