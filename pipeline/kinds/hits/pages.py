"""Page normalisation: one page per resource, whatever the spelling of its URL (pure).

Access logs keep what clients sent: ``/a/``, ``/a``, ``/%61``, ``/a?utm_source=x`` and
``/search?q=...`` (a new page per query) would each get documents of their own, and a
crawler walking query strings would grow the collections without bound. Every page is
normalised before it is counted (docs/rollups.md):

- an absolute URL (``https://host/a``) keeps its path, a fragment (``#x``) is dropped;
- percent-encoded unreserved characters (letters, digits, ``-._~``) are decoded and
  the remaining escapes' hex digits upper-cased (RFC 3986, 6.2.2);
- a trailing ``/`` is dropped (``/a/`` → ``/a``; ``/`` stays ``/``) and runs of ``/``
  become one;
- the path's case is kept (paths are case-sensitive: RFC 3986, 6.2.2.1) unless
  ``PREAGG_HITS_LOWERCASE_PATHS`` is set;
- the query string follows ``PREAGG_HITS_QUERY_STRING``: ``drop`` (the default, as web
  analytics tools do), ``keep``, or ``allow:<name>,<name>`` (keep only those
  parameters, in their order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.errors import InputError

_ESCAPE = re.compile("%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SLASHES = re.compile("/{2,}")


class QueryPolicyError(InputError):
    """A ``PREAGG_HITS_QUERY_STRING`` that is none of ``drop``, ``keep``, ``allow:<names>``."""


@dataclass(frozen=True)
class PageRules:
    """How pages are normalised: the query-string policy and the path's case."""

    query: str = "drop"
    allowed: tuple[str, ...] = ()
    lowercase: bool = False

    @classmethod
    def parse(cls, policy: str, lowercase: bool = False) -> PageRules:
        """Rules from ``PREAGG_HITS_QUERY_STRING`` (``drop``, ``keep``, ``allow:a,b``)."""
        text = policy.strip()
        if text in ("drop", "keep"):
            return cls(text, (), lowercase)
        if text.startswith("allow:"):
            names = tuple(n.strip() for n in text[len("allow:") :].split(",") if n.strip())
            if names:
                return cls("allow", names, lowercase)
        raise QueryPolicyError(
            f"PREAGG_HITS_QUERY_STRING={policy!r}: expected drop, keep or allow:<name>,<name>"
        )

    def __call__(self, page: str) -> str:
        """The normalised page (pages already in normal form are returned as they are, fast)."""
        if (
            "?" in page
            or "#" in page
            or "%" in page
            or "//" in page
            or self.lowercase
            or (len(page) > 1 and page[-1] == "/")
        ):
            return self.normalise(page)
        return page

    def normalise(self, page: str) -> str:
        """The full normalisation of :data:`__doc__`."""
        page = page.split("#", 1)[0]
        path, sep, query = page.partition("?")
        if path.startswith(("http://", "https://")):
            rest = path.split("://", 1)[1]
            slash = rest.find("/")
            path = rest[slash:] if slash >= 0 else "/"
        path = _ESCAPE.sub(_unescape, path)
        path = _SLASHES.sub("/", path)
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
        if self.lowercase:
            path = path.lower()
        if not path:
            path = "/"
        if not sep or self.query == "drop":
            return path
        if self.query == "allow":
            kept = [p for p in query.split("&") if p.split("=", 1)[0] in self.allowed]
            query = "&".join(kept)
        return f"{path}?{query}" if query else path


def _unescape(m: re.Match[str]) -> str:
    """An escape of an unreserved character decoded; any other escape's hex upper-cased."""
    byte = int(m.group(1), 16)
    return chr(byte) if byte in _UNRESERVED else f"%{m.group(1).upper()}"
