"""Bloom filters stored as 64-bit words in MongoDB (pure logic).

Sizing, by the standard formulas for ``n`` expected members and false-positive rate
``p``: ``m = -n ln p / (ln 2)^2`` bits (rounded up to whole 64-bit words) and
``k = (m / n) ln 2`` hash functions. The ``k`` bit positions of a key come from two
base hashes (Kirsch–Mitzenmacher: ``g_j = h1 + j * h2 mod m``), the two halves of
one XXH3-128 digest: one hash call per key, stable across processes and machines.

Storage shape (why): MongoDB's ``$bit`` updates only 32/64-bit integers, and
``$bitsAllSet`` takes an integer, BinData or a list of bit positions. So a filter
is a sub-document of int64 words, ``{b: {"0": w0, "17": w17, ...}}``, holding only
the words with bits set. Adding members is one upsert with ``$bit: {"b.17": {or:
mask}}`` per touched word: atomic on the server, commutative, idempotent (OR).
Testing a key is a query with ``{"b.<w>": {$bitsAllSet: [positions]}}`` per word
its bits fall in, evaluated on the server.

A filter that is read and rewritten anyway (the listens "heard" filter, merged in
the same read-modify-write as its document's sketches) is stored as one BinData
instead: the filter's bits as an unsigned little-endian number, trailing zero
bytes dropped, which is how ``$bitsAllSet`` reads BinData (MongoDB manual,
``$bitsAllSet``: "BinData values ... are interpreted as though they are
arbitrary-length unsigned little-endian numbers", zero-extended). One field
instead of up to ``m / 64``: an update that sets one binary costs the embedded
store a third of one that ORs 150 words (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import xxhash

from pipeline.core.ids import Id, id_bytes, to_int64

WORD = 64
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BloomSpec:
    """Size of one family of filters: ``m`` bits in ``m / 64`` words, ``k`` hashes."""

    n: int
    p: float
    m: int
    k: int

    @classmethod
    def for_capacity(cls, n: int, p: float) -> BloomSpec:
        """Optimal ``m`` (whole words) and ``k`` for ``n`` members at rate ``p``."""
        if n < 1 or not 0 < p < 1:
            raise ValueError("need n >= 1 and 0 < p < 1")
        bits = math.ceil(-n * math.log(p) / math.log(2) ** 2)
        m = math.ceil(bits / WORD) * WORD
        k = max(1, round(m / n * math.log(2)))
        return cls(n, p, m, k)

    @property
    def words(self) -> int:
        """64-bit words of a full filter."""
        return self.m // WORD

    def positions(self, key: Id) -> list[int]:
        """The ``k`` bit positions of ``key`` (Kirsch–Mitzenmacher from one 128-bit hash)."""
        digest = xxhash.xxh3_128_intdigest(id_bytes(key))
        h1, h2 = digest & _MASK64, (digest >> 64) | 1  # odd h2: the k positions differ
        return [(h1 + j * h2) % self.m for j in range(self.k)]

    def masks(self, key: Id) -> dict[int, int]:
        """Word index → unsigned 64-bit mask of ``key``'s bits."""
        out: dict[int, int] = {}
        for pos in self.positions(key):
            w, b = divmod(pos, WORD)
            out[w] = out.get(w, 0) | (1 << b)
        return out

    def expected_fpr(self, members: int) -> float:
        """False-positive rate of a filter holding ``members`` keys: ``(1 - e^(-kn/m))^k``."""
        return float((1 - math.exp(-self.k * members / self.m)) ** self.k)


def merge_masks(into: dict[int, int], masks: Mapping[int, int]) -> None:
    """OR ``masks`` into ``into`` (word index → mask)."""
    for w, mask in masks.items():
        into[w] = into.get(w, 0) | mask


def bit_updates(field: str, masks: Mapping[int, int]) -> dict[str, int]:
    """``$bit ... or`` operands: dotted word path → signed int64 mask."""
    return {f"{field}.{w}": to_int64(mask) for w, mask in sorted(masks.items())}


def contains_query(field: str, spec: BloomSpec, key: Id) -> dict[str, object]:
    """Server-side test "this filter contains ``key``": one ``$bitsAllSet`` per word."""
    return {
        f"{field}.{w}": {"$bitsAllSet": [b for b in range(WORD) if mask >> b & 1]}
        for w, mask in sorted(spec.masks(key).items())
    }


def contains(words: Mapping[str, int], spec: BloomSpec, key: Id) -> bool:
    """The same test on a filter read back (``{"17": int64, ...}``): no false negatives."""
    for w, mask in spec.masks(key).items():
        stored = words.get(str(w), 0) & _MASK64
        if stored & mask != mask:
            return False
    return True


def masks_value(masks: Mapping[int, int]) -> int:
    """Word index → mask, as one number (bit ``64 * w + b`` for bit ``b`` of word ``w``)."""
    out = 0
    for w, mask in masks.items():
        out |= (mask & _MASK64) << (WORD * w)
    return out


def filter_value(stored: object) -> int:
    """The bits of a stored filter: BinData (little-endian number) or a sub-document of int64 words."""
    if isinstance(stored, bytes | bytearray):  # bson.Binary is a bytes
        return int.from_bytes(stored, "little")
    if isinstance(stored, Mapping):
        return masks_value({int(w): int(v) for w, v in stored.items()})
    return 0


def filter_bytes(value: int) -> bytes:
    """A filter's bits as BinData content: little-endian, without trailing zero bytes."""
    return value.to_bytes((value.bit_length() + 7) // 8, "little")


def contains_value(value: int, spec: BloomSpec, key: Id) -> bool:
    """Test ``key`` against a filter's bits (:func:`filter_value`): no false negatives."""
    return all(value >> pos & 1 for pos in spec.positions(key))


def binary_contains_query(field: str, spec: BloomSpec, key: Id) -> dict[str, object]:
    """Server-side test of a BinData filter: one ``$bitsAllSet`` with ``key``'s positions."""
    return {field: {"$bitsAllSet": sorted(set(spec.positions(key)))}}


def members_bits(keys: Iterable[Id], spec: BloomSpec) -> dict[int, int]:
    """Words of a filter holding ``keys`` (for tests and benchmarks)."""
    out: dict[int, int] = {}
    for key in keys:
        merge_masks(out, spec.masks(key))
    return out
