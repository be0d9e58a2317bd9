"""The name store's rules, without I/O: namespaces, documents, tokens, limits.

Per namespace, documents ``{_id: "<namespace>|<seq>", namespace, least_value, list, cap}``
(stored names per ``schemas/store/fields.json``). A name's token is ``least_value`` + its
position in ``list``; names are only ever appended, so a token never changes. A
document holds at most ``cap`` names; the next one starts at ``least_value + cap``.
A namespace holds at most ``limit`` names: past it, new names get :data:`OTHER`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.ids import escape_part

#: Token of every name past its namespace's limit (digits are real tokens).
OTHER = "other"


def names_namespace(site: str) -> str:
    """Namespace of a site's custom property names."""
    return f"n/{escape_part(site)}"


def values_namespace(site: str, name: str) -> str:
    """Namespace of the values of one custom property of a site."""
    return f"v/{escape_part(site)}/{name}"


def doc_id(namespace: str, seq: int) -> str:
    """``_id`` of a namespace's ``seq``-th document (the namespace may hold ``|``; the suffix is digits)."""
    return f"{namespace}|{seq}"


@dataclass
class Namespace:
    """What a worker knows of one namespace: its tokens and its last document."""

    name: str
    tokens: dict[str, int] = field(default_factory=dict)
    #: Sequence number, first token, capacity and length of the last document
    #: (``seq == -1``: no document yet).
    seq: int = -1
    least: int = 0
    cap: int = 0
    length: int = 0

    @property
    def size(self) -> int:
        """Names the namespace holds."""
        return self.least + self.length

    def full(self, limit: int) -> bool:
        """No name can be added: the namespace holds ``limit`` names (its content is final)."""
        return self.size >= limit

    def room(self, limit: int) -> int:
        """Names the last document can still take."""
        if self.seq < 0:
            return 0
        return max(0, min(self.cap, limit - self.least) - self.length)

    def absorb(self, doc: Mapping[str, Any], f: Mapping[str, str]) -> None:
        """Take a document's names as tokens and make it the last document known."""
        least, names = int(doc[f["least_value"]]), doc[f["list"]]
        for pos, n in enumerate(names):
            self.tokens.setdefault(n, least + pos)
        self.seq = int(str(doc["_id"]).rsplit("|", 1)[1])
        self.least, self.cap, self.length = least, int(doc[f["cap"]]), len(names)

    def next_doc(self, doc_cap: int, limit: int) -> tuple[int, int, int]:
        """``(seq, least_value, cap)`` of the document that follows the last one."""
        least = self.least + self.cap if self.seq >= 0 else 0
        return self.seq + 1, least, max(0, min(doc_cap, limit - least))


@dataclass(frozen=True)
class Registration:
    """One write of a bulk registration: ``names`` into a namespace's document ``seq``.

    ``create``: the document does not exist yet and is created holding ``names`` (an
    upsert that does nothing if another worker created it first); otherwise the names
    are appended if none is there and the list stays within ``bound``.
    """

    namespace: str
    seq: int
    least: int
    cap: int
    bound: int
    names: tuple[str, ...]
    create: bool


def plan_registration(ns: Namespace, names: set[str], limit: int, doc_cap: int) -> Registration | None:
    """The one write that registers as many of ``names`` as ``ns``'s last (or next) document takes."""
    if not names or ns.full(limit):
        return None
    room = ns.room(limit)
    if room > 0:
        batch = tuple(sorted(names)[:room])
        return Registration(ns.name, ns.seq, ns.least, ns.cap, min(ns.cap, limit - ns.least), batch, False)
    seq, least, cap = ns.next_doc(doc_cap, limit)
    if cap <= 0:
        return None
    return Registration(ns.name, seq, least, cap, cap, tuple(sorted(names)[:cap]), True)


def learn(name: str, docs: Sequence[Mapping[str, Any]], f: Mapping[str, str]) -> Namespace | None:
    """A namespace's state from its documents, or ``None`` if the read was torn.

    A read of several documents is not a snapshot: a document may fill, and the next
    one appear, while the cursor runs. Only the last document may be short of its
    cap and each must start where the previous one ends; otherwise read again.
    """
    ns = Namespace(name)
    ordered = sorted(docs, key=lambda d: int(d[f["least_value"]]))
    for i, d in enumerate(ordered):
        if int(d[f["least_value"]]) != (ns.least + ns.cap if i else 0):
            return None
        if i < len(ordered) - 1 and len(d[f["list"]]) != int(d[f["cap"]]):
            return None
        ns.absorb(d, f)
    return ns


def escape_key(text: str) -> str:
    """Readable-mode field name of ``text``: ``%``, ``.``, ``$``, NUL percent-encoded; ``""`` → ``%``."""
    if not text:
        return "%"
    return text.replace("%", "%25").replace(".", "%2E").replace("$", "%24").replace("\0", "%00")


def unescape_key(key: str) -> str:
    """Inverse of :func:`escape_key`."""
    if key == "%":
        return ""
    return _ESCAPED.sub(lambda m: _UNESCAPE[m.group(1)], key)


_UNESCAPE = {"25": "%", "2E": ".", "24": "$", "00": "\0"}
_ESCAPED = re.compile("%(25|2E|24|00)")


#: Readable-mode key of the overflow token: no escaped name can equal it.
READABLE_OTHER = "%other"
