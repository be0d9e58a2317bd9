""" "Has this user heard that song under this tag": exact while small, then growing Bloom filters (pure).

A (user, tag) document answers from what it already holds while it can:

* while its whole sketch is **explicit** (at most 128 distinct songs, their exact
  64-bit hashes: :mod:`pipeline.core.hll`), a song is heard if its hash is in the
  sketch. No filter is stored: on Last.fm 2K every (user, tag) is below 100 songs,
  and a filter sized for 1,000 songs was 1,099 of a document's 1,296 bytes;
* when the sketch leaves the explicit form, **filter 0** is built from the explicit
  hashes, and new songs go to the last filter. Filter ``i`` holds
  ``first * 2^i`` songs: when the distinct songs (the
  sketch's estimate) pass the capacities so far, the next, twice as big, opens. Filter
  ``i`` keeps ``fpr * 0.2 * 0.8^i``: the rates add up to less than ``fpr`` at any size
  (a scalable Bloom filter: Almeida et al., "Scalable Bloom Filters", 2007), and the
  bytes grow with the songs (docs/listens.md has the figures).

Bit positions come from the song's 64-bit sketch hash (Kirsch–Mitzenmacher, the
second hash a SplitMix64 of the first), which is what lets filter 0 be built from
the explicit hashes. A song already in some filter is not added again, so a
replayed flush changes nothing. Documents written before this layout hold one
filter ``heard`` of :data:`LEGACY` size, with positions from the song id: it is
still tested, never grown (its songs are all there; later ones go to the new filters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from pipeline.core.bloom import BloomSpec, contains, contains_value, filter_bytes, filter_value
from pipeline.core.ids import Id

_MASK64 = (1 << 64) - 1
#: Songs an explicit sketch holds (``pipeline.core.hll.EXPLICIT_MAX``; not imported: the
#: settings import this module, and the command line starts without numpy).
EXPLICIT_MAX = 128
#: Each next filter's rate is this times the previous one's: the rates add up to ``fpr``
#: (a geometric series), and 0.8 costs fewer bits per song than halving (Almeida et al.
#: recommend 0.8-0.9 with doubling capacities).
TIGHTENING = 0.8
#: Most filters a document opens: 256 * (2^13 - 1), about 2.1 million songs, in about
#: 5 MB. Past that the last filter keeps taking songs and its false positives rise above
#: the rate, rather than the document growing toward MongoDB's 16 MB limit.
MAX_FILTERS = 13
#: Filters of documents written before: 1,000 songs at 1% (the default then).
LEGACY = BloomSpec.for_capacity(1000, 0.01)


def _mix(h: int) -> int:
    """SplitMix64's finaliser: a second hash of a 64-bit hash."""
    h = (h + 0x9E3779B97F4A7C15) & _MASK64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def positions(h: int, spec: BloomSpec) -> list[int]:
    """The ``k`` bit positions of the song of hash ``h`` in a filter of ``spec``."""
    h2 = _mix(h) | 1
    return [(h + j * h2) % spec.m for j in range(spec.k)]


@dataclass(frozen=True)
class HeardSpec:
    """Sizes of a document's filters: the first one's capacity, and the rate all of them keep."""

    first: int = 256
    fpr: float = 0.01

    def spec(self, i: int) -> BloomSpec:
        """Filter ``i``: ``first * 2^i`` songs at ``fpr * (1 - r) * r^i`` (:data:`TIGHTENING` r)."""
        return _spec(self.first << i, self.fpr * (1 - TIGHTENING) * TIGHTENING**i)

    def count_for(self, songs: float) -> int:
        """Filters needed to hold ``songs`` distinct songs (at least one)."""
        count, room = 1, self.first
        while songs > room and count < MAX_FILTERS:
            room += self.first << count
            count += 1
        return count

    def holds(self, values: Sequence[int], h: int) -> bool:
        """Whether any filter has every bit of ``h``."""
        for i, value in enumerate(values):
            if value and all(value >> pos & 1 for pos in positions(h, self.spec(i))):
                return True
        return False

    def expected_fpr(self, songs: int) -> float:
        """False-positive rate of a document of ``songs`` distinct songs (0 while explicit)."""
        if songs <= EXPLICIT_MAX:
            return 0.0
        count, left, miss = self.count_for(songs), songs, 1.0
        for i in range(count):
            spec = self.spec(i)
            held = left if i == count - 1 else min(left, spec.n)
            left -= held
            miss *= 1 - spec.expected_fpr(held)
        return 1 - miss


@cache
def _spec(n: int, p: float) -> BloomSpec:
    return BloomSpec.for_capacity(n, p)


def grown(
    stored: Sequence[bytes], songs: float | None, seed: Iterable[int], spec: HeardSpec
) -> list[bytes] | None:
    """The filters after adding the songs of hashes ``seed`` (``None``: none needed, the sketch is explicit).

    ``songs``: the distinct songs of the document's whole sketch after this flush, or
    ``None`` while the sketch is explicit. ``seed``: the hashes of the songs this flush
    adds, and, when the sketch has just left the explicit form, those it held.
    """
    if songs is None:
        return None
    values = [int.from_bytes(b, "little") for b in stored]
    values += [0] * (max(len(values), spec.count_for(songs)) - len(values))
    last = spec.spec(len(values) - 1)
    for h in seed:
        if not spec.holds(values, h):
            for pos in positions(h, last):
                values[-1] |= 1 << pos
    return [filter_bytes(v) for v in values]


def heard_in_filters(doc: Mapping[str, Any], song: Id, h: int, f: Mapping[str, str], spec: HeardSpec) -> bool:
    """A document past the explicit form: its filters, or its legacy filter. No false negatives."""
    if spec.holds([int.from_bytes(bytes(b), "little") for b in doc.get(f["filters"]) or ()], h):
        return True
    legacy = doc.get(f["heard"])
    if isinstance(legacy, Mapping):
        return contains({str(k): int(v) for k, v in legacy.items()}, LEGACY, song)
    return legacy is not None and contains_value(filter_value(legacy), LEGACY, song)
