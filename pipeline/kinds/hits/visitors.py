"""Who a visitor is: a hit's identity, and its keyed hash (pure).

A visitor is, in order (docs/visitors.md):

* a JSON event's ``visitor`` field: an opaque id the producer chose (a string or an integer);
* its ``ip`` and ``ua`` fields, or an access-log line's client address and user agent,
  as Plausible and Umami count: the same address with another browser is another visitor.

A hit whose user agent is a known crawler (:func:`~pipeline.kinds.hits.clf.agent_family`
``Bot``) is nobody: bots are page views, never visitors. A hit with none of these fields
is a page view whose visitor is unknown; it counts in no sketch.

The identity never leaves the worker's memory. At ingest it is hashed without a key
(XXH3-128 of site and identity: the same person on two sites is two visitors, as in
Plausible); the flush hashes that again with the day's key (BLAKE2b keyed, 64 bits) and
only this keyed hash is written. The key is derived from a secret kept in the store
(:mod:`pipeline.kinds.hits.salt`): per UTC day of the hit (``daily``) or one for all days
(``fixed``).
"""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Any

import xxhash

from pipeline.core.errors import InputError
from pipeline.kinds.hits.clf import BOT_FAMILY, agent_family

#: Longest ``visitor`` id, ``ip`` and ``ua`` accepted, in characters.
MAX_VISITOR = 256
MAX_IP = 64
MAX_UA = 1024


class VisitorFieldError(InputError):
    """A ``visitor``, ``ip`` or ``ua`` field of the wrong type or too long (the hit is refused)."""


def _text(obj: dict[str, Any], name: str, limit: int, numbers: bool = False) -> str | None:
    value = obj.get(name)
    if value is None:
        return None
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise VisitorFieldError(f"{name} must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise VisitorFieldError(f"{name} is {len(value)} characters, over {limit}")
    return value


def identity(obj: dict[str, Any]) -> str | None:
    """The visitor of a decoded hit event, or ``None`` (unknown, or a crawler).

    Raises :class:`VisitorFieldError` for a field of the wrong type or too long.
    """
    visitor = _text(obj, "visitor", MAX_VISITOR, numbers=True)
    ua = _text(obj, "ua", MAX_UA)
    ip = _text(obj, "ip", MAX_IP)
    if ua is not None and agent_family(ua) == BOT_FAMILY:
        return None
    if visitor:
        return f"v\x00{visitor}"
    if ip:
        return f"a\x00{ip}\x00{ua or ''}"
    return None


def ident_hash(site: str, who: str) -> int:
    """The unkeyed in-memory hash of a visitor of ``site`` (128 bits; never stored)."""
    return xxhash.xxh3_128_intdigest(f"{site}\x00{who}".encode("utf-8", "surrogatepass"))


def day_key(secret: bytes, day: date | None) -> bytes:
    """The key of one UTC day (``daily``), or of every day (``day`` ``None``: ``fixed``)."""
    label = b"fixed" if day is None else day.isoformat().encode()
    return hashlib.blake2b(label, key=secret, digest_size=32, person=b"preagg-visitor").digest()


def keyed_hash(key: bytes, ident: int) -> int:
    """The stored 64-bit hash of an in-memory identity hash under a day's key."""
    digest = hashlib.blake2b(ident.to_bytes(16, "big"), key=key, digest_size=8).digest()
    return int.from_bytes(digest, "big")
