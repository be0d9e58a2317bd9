"""The site of a shipped log line: a fixed site, or an envelope field through a small table (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import PurePath

from pipeline.core.errors import InputError
from pipeline.core.shippers import Shipped

#: Distinct field values whose site is remembered (hosts and files are few; a flood is not cached).
CACHE_LIMIT = 10_000


class SiteMapError(InputError):
    """A ``PREAGG_HITS_SITE_MAP`` entry is not ``PATTERN=SITE``."""


class SiteMap:
    """``PREAGG_HITS_SITE``, ``PREAGG_HITS_SITE_FIELD`` and ``PREAGG_HITS_SITE_MAP`` applied to a line."""

    def __init__(self, fixed: str = "", field: str = "", table: Sequence[str] = ()) -> None:
        self.fixed = fixed
        self.field = field
        self.entries: list[tuple[str, str]] = []
        for entry in table:
            pattern, sep, site = entry.partition("=")
            if not sep or not pattern.strip() or not site.strip():
                raise SiteMapError(f"PREAGG_HITS_SITE_MAP entry {entry!r}: expected PATTERN=SITE")
            self.entries.append((pattern.strip(), site.strip()))
        self._cache: dict[str, str | None] = {}

    def site(self, shipped: Shipped) -> str | None:
        """The line's site, or ``None`` when nothing names one."""
        value = None
        if self.field == "host":
            value = shipped.host
        elif self.field == "file":
            value = shipped.path
        if value:
            try:
                found = self._cache[value]
            except KeyError:
                found = self._lookup(value)
                if len(self._cache) < CACHE_LIMIT:
                    self._cache[value] = found
            if found:
                return found
        return self.fixed or None

    def _lookup(self, value: str) -> str | None:
        for pattern, site in self.entries:
            if fnmatchcase(value, pattern):
                return site
        if self.entries:
            return None
        return PurePath(value).stem if self.field == "file" else value

    def explain(self, shipped: Shipped) -> str:
        """Why :meth:`site` found none (the dead letter's reason)."""
        if self.field:
            value = shipped.host if self.field == "host" else shipped.path
            if value:
                unset = "matches no PREAGG_HITS_SITE_MAP entry and PREAGG_HITS_SITE is unset"
                return f"{self.field} {value!r} {unset}"
            return f"the {shipped.source} line has no {self.field} and PREAGG_HITS_SITE is unset"
        return f"a {shipped.source} line names no site: set PREAGG_HITS_SITE or PREAGG_HITS_SITE_FIELD"
