"""Distinct counts as mergeable fields: a sketch that plain update operators keep exactly once (pure).

A sketch held in a document (a *holder*: a sub-document such as ``v`` or ``vh.13``) has
three parts, each written with ``$addToSet``, ``$max`` or ``$bit or`` only, so that a write
applied twice, two workers' writes in either order, or a flush written again by a
partition's next owner leave the same sketch: the register-wise maximum of HyperLogLog is
idempotent and commutative, and so is a set union.

* ``x: [chunk, ...]`` (``$addToSet``): the explicit form, the 64-bit hashes themselves,
  written while the writer has written at most :data:`EXPLICIT_MAX` to the holder. Each
  element is one flush's hashes for the holder packed in one binary value
  (:func:`explicit_chunk`: 8 bytes a hash, sorted, so that the same flush written again adds
  nothing); a reader takes the union of every chunk's hashes. Holders written before chunks
  hold the hashes themselves, as signed 64-bit integers, and readers take both. One stored
  element per flush instead of one per visitor: a store's update cost grows with the
  elements a document holds (on the embedded store a page day with 128 hashes in its array
  cost 2.2 ms an update, 0.33 ms with the same bytes in one value). One path per holder;
* ``r.<word>: mask`` (``$bit or``, in a document of its own: the caller's choice): HyperLogLog
  registers (:data:`P` = 14: 16,384 registers, standard error 1.04 / √16384 = 0.81%), written
  for the hashes that come after. A register is a *thermometer* of :data:`LANE_BITS` bits
  (rank r: its r low bits set), so that OR is the register-wise maximum; four registers
  share one 64-bit word, one field per word touched (14 bytes; 57 KB when all 4,096 are).
  Ranks stop at 15, which only a register that has seen 2^15 of its 1/16,384 share of the
  hashes reaches (half a billion visitors);
* ``o: true`` (``$max``): set with the first registers: from then on some hashes are only in ``r``.

Or the registers are one source partition's (:func:`merged_blob`): the codec bytes of
:mod:`pipeline.core.hll`, read, maxed and set by the partition's one writer. One field per
holder and partition instead of a path per word touched. Every partition's are fields of one
document per holder (``<partition>: bytes``, :class:`Parts`), listed in the holder's ``w`` as
:data:`PARTS`: each field has one writer, so a worker flushing several partitions writes their
fields in one statement (documents written before kept one per partition, listed by their
partition's number). :func:`estimate` reads every form.

A site rollup's day (month) holder keeps each partition's registers in itself instead
(``b.<partition>``: :data:`INLINE`, the same codec bytes read, maxed and set by the
partition's writer), so that a chart reads one document a day, the day being written too.
Once the period has settled they are folded into one (:func:`folded`): ``f``, with ``b``
and ``w`` emptied and the register documents deleted, in one transaction
(:mod:`pipeline.kinds.hits.sites.fold`). A writer of the shared form lists :data:`SHARED`
in ``w``, as a partition lists itself.

A holder without ``o`` holds every hash in ``x``, so its count (and that of a union of such
holders) is exact, up to 64-bit hash collisions. Otherwise the estimate is HyperLogLog++'s
over ``r`` with the ``x`` hashes folded in (datasketch's estimator, the one
:mod:`pipeline.core.hll` uses). A writer that forgets how much it wrote (a restart, an
evicted budget entry, another worker of a keyless stream) writes at most
:data:`EXPLICIT_MAX` more hashes to ``x`` before it switches: ``x`` stays bounded per
writer, not per holder (docs/visitors.md).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from pipeline.core import hll
from pipeline.core.hll import Sketch

#: Precision of the registers: 2^14 registers, 0.81% standard error.
P = 14
#: Registers per stored word, bits per register (a thermometer), highest rank kept.
LANES = 4
LANE_BITS = 15
RANK_CAP = LANE_BITS
LANE_MASK = (1 << LANE_BITS) - 1
#: Hashes one writer puts in a holder's explicit form before it writes registers.
EXPLICIT_MAX = 128
#: Holders whose written count a writer remembers (the oldest forgotten first).
BUDGET_HOLDERS = 200_000

EXPLICIT, REGISTERS, OVERFLOW, WRITERS, FOLDED, INLINE = "x", "r", "o", "w", "f", "b"
#: What a writer of the shared register document lists in its holder's ``w``.
SHARED = -1
#: What a writer of the partitions' register document (:class:`Parts`) lists in ``w``.
PARTS = -2


@dataclass(frozen=True)
class Parts:
    """The partitions' register document's registers as stored: (partition, codec bytes) in the
    document's order (an equality on the stored sub-document must keep it)."""

    fields: tuple[tuple[str, bytes], ...]


#: Stored registers as a query reads them: the shared form's words (word -> thermometer
#: mask), one partition's codec bytes (:mod:`pipeline.core.hll`), or the partitions' (:class:`Parts`).
Registers = Mapping[Any, Any] | bytes | Parts


def signed(h: int) -> int:
    """A 64-bit hash as BSON's signed 64-bit integer."""
    return h - (1 << 64) if h >= 1 << 63 else h


def unsigned(v: int) -> int:
    """Inverse of :func:`signed`."""
    return v & ((1 << 64) - 1)


def register_of(h: int, p: int = P) -> tuple[int, int]:
    """The register of hash ``h`` and the rank it offers, as datasketch's HyperLogLog++ computes
    them (the low ``p`` bits choose the register, the rest give the rank)."""
    index = h & ((1 << p) - 1)
    bits = h >> p
    return index, (64 - p) - bits.bit_length() + 1


class PackedInts(bytes):
    """An ``$addToSet`` element standing for a set of signed 64-bit integers (little-endian,
    ascending, distinct) of which readers take the union with the path's other elements.

    The same path's elements from several partitions merged into one update are written as one
    element, their union (:func:`~pipeline.core.updates.merge_sources`): a store's update costs
    more for each element a document holds, and a reader's union is the same. A partition's
    share written again apart (by its next owner) adds its own element, the same integers
    again: the union is unchanged. A ``bytes``, which BSON writes as binary data (subtype 0,
    as ``Binary`` would: a third of its cost to make).
    """

    __slots__ = ()

    @classmethod
    def of(cls, values: np.ndarray) -> PackedInts:  # type: ignore[type-arg]
        """The element of ``values`` (int64, ascending, distinct)."""
        return cls(np.ascontiguousarray(values, dtype="<i8").tobytes())

    @classmethod
    def union_element(cls, parts: Iterable[bytes]) -> PackedInts:
        """One element holding every part's integers."""
        return cls.of(np.unique(np.concatenate([np.frombuffer(p, dtype="<i8") for p in parts])))


def explicit_chunk(hashes: Iterable[int]) -> PackedInts:
    """Hashes (signed or not) as one element of an explicit form: sorted signed 64-bit little-endian."""
    return PackedInts.of(np.array(sorted({signed(unsigned(h)) for h in hashes}), dtype=np.int64))


def explicit_hashes(values: Iterable[Any]) -> set[int]:
    """The hashes (signed) of a stored explicit form: its chunks' and, written before chunks, its integers."""
    out: set[int] = set()
    for v in values:
        if isinstance(v, bytes):
            out.update(np.frombuffer(v, dtype="<i8").tolist())
        else:
            out.add(int(v))
    return out


def explicit_fields(holder: str, hashes: Iterable[int]) -> dict[str, list[Any]]:
    """The ``$addToSet`` path and value that add ``hashes`` to the explicit form of ``holder``:
    one chunk (:func:`explicit_chunk`)."""
    return {f"{holder}.{EXPLICIT}": [explicit_chunk(hashes)]}


def register_words(hashes: Iterable[int], p: int = P) -> dict[int, int]:
    """Word index → the OR of the thermometers of ``hashes``' registers in it."""
    words: dict[int, int] = {}
    for h in hashes:
        i, rank = register_of(h, p)
        word, lane = divmod(i, LANES)
        words[word] = words.get(word, 0) | (((1 << min(rank, RANK_CAP)) - 1) << (lane * LANE_BITS))
    return words


def register_ranks_of(hashes: np.ndarray | Iterable[int], p: int = P) -> np.ndarray:  # type: ignore[type-arg]
    """The highest rank unsigned 64-bit ``hashes`` (a numpy array, or ints) offer each register
    (:func:`register_of`), as dense registers (int8, 0 where no hash falls): a partition's
    registers, maxed with the stored ones in one call."""
    h = hashes.astype(np.uint64) if isinstance(hashes, np.ndarray) else np.fromiter(hashes, dtype=np.uint64)
    index = (h & np.uint64((1 << p) - 1)).astype(np.int64)
    # The bits above the index number fewer than 53: a float64 holds them exactly, and frexp's
    # exponent is their bit length (0 for 0), as int.bit_length() says.
    _, length = np.frexp((h >> np.uint64(p)).astype(np.float64))
    reg = np.zeros(1 << p, dtype=np.int8)
    np.maximum.at(reg, index, ((64 - p) - length.astype(np.int64) + 1).astype(np.int8))
    return reg


def merged_blob(stored: bytes | None, ranks: np.ndarray, p: int = P) -> bytes:  # type: ignore[type-arg]
    """A partition's stored registers (codec bytes, ``None``: none yet) with ``ranks`` maxed in
    (dense registers: :func:`register_ranks_of`).

    One writer per partition reads, maxes and sets them: one field for the whole sketch,
    where the shared form's ``$bit or`` takes a path per word touched (up to 4,096).
    """
    found = hll.decode(stored).reg if stored else None
    reg = np.zeros(1 << p, dtype=np.int8) if found is None else found.astype(np.int8)  # maxed in place
    np.maximum(reg, ranks, out=reg)
    return Sketch(p, reg=reg).encode()


def register_share(holder: str, hashes: Iterable[int], p: int = P) -> Fields:
    """The holder's overflow mark, and the register words that add ``hashes``."""
    return Fields({f"{holder}.{OVERFLOW}": True}, register_words(hashes, p), {})


@dataclass(frozen=True)
class Fields:
    """One holder's share of a flush: its ``$max`` fields, register words to OR into its
    registers (word index → mask; none while explicit), and its ``$addToSet`` hashes."""

    max: dict[str, Any]
    words: dict[int, int]
    add_to_set: dict[str, list[Any]]


def holder_key(collection: str, doc_id: Any, holder: str) -> bytes:
    """8 bytes naming one holder in a flush's recorded decisions (which holders it wrote as registers)."""
    return xxhash.xxh64_digest(f"v\x00{collection}\x00{doc_id}\x00{holder}".encode("utf-8", "surrogatepass"))


class Budget:
    """How many hashes this writer has put in each holder's explicit form (bounded, oldest forgotten).

    Forgetting is safe: the writer then writes up to :data:`EXPLICIT_MAX` more hashes to
    ``x`` before it switches to registers, and the count stays right either way.
    """

    def __init__(self, explicit_max: int = EXPLICIT_MAX, holders: int = BUDGET_HOLDERS) -> None:
        self.explicit_max = explicit_max
        self.holders = holders
        self._written: OrderedDict[bytes, int] = OrderedDict()
        #: Holders switched to registers by this writer.
        self.switched = 0

    def fields(
        self, collection: str, doc_id: Any, holder: str, hashes: set[int], registers: bool | None = None
    ) -> Fields:
        """The fields that add ``hashes`` to one holder: explicit while this writer's count stays
        within the bound, registers from the flush that would pass it.

        ``registers`` given: that form, whatever the count says (a flush written again decides
        as it did first: its recorded decisions, :func:`holder_key`).
        """
        if self.registers(collection, doc_id, holder, len(hashes), registers):
            return register_share(holder, hashes)
        return Fields({}, {}, explicit_fields(holder, hashes))

    def registers(
        self, collection: str, doc_id: Any, holder: str, n: int, forced: bool | None = None
    ) -> bool:
        """Whether ``n`` more hashes go to the holder's registers (and count them)."""
        return self.registers_of(holder_key(collection, doc_id, holder), n, forced)

    def registers_of(self, key: bytes, n: int, forced: bool | None = None) -> bool:
        """:meth:`registers` of the holder named ``key`` (:func:`holder_key`: 8 bytes, where a
        tuple of its names took three strings; two holders of one name would share a count,
        which switches them sooner or later, and their counts stay right either way)."""
        written = self._written.pop(key, 0)
        switch = written < 0 or written + n > self.explicit_max if forced is None else forced
        if switch:
            if written >= 0:
                self.switched += 1
            self._remember(key, -1)  # switched: registers from now on
            return True
        self._remember(key, written + n)
        return False

    def _remember(self, key: bytes, value: int) -> None:
        self._written[key] = value
        if len(self._written) > self.holders:
            self._written.popitem(last=False)


@dataclass(frozen=True)
class Estimate:
    """A distinct count read from stored holders, and whether it is exact."""

    value: int
    exact: bool


def overflowed(holder: Mapping[str, Any] | None) -> bool:
    """Whether a stored holder has registers (its count is then an estimate)."""
    return bool(holder and holder.get(OVERFLOW))


def _gather(
    holders: Iterable[Mapping[str, Any] | None], registers: Iterable[Registers | None], p: int = P
) -> tuple[set[int], np.ndarray, bool]:  # type: ignore[type-arg]
    """The explicit hashes (signed), the registers' maximum and the overflow of stored holders and
    registers (either form)."""
    hashes: set[int] = set()
    reg = np.zeros(1 << p, dtype=np.int8)
    overflow = False
    folds: list[bytes] = []  # a folded holder's registers read as a partition's are
    for holder in holders:
        if not holder:
            continue
        hashes.update(explicit_hashes(holder.get(EXPLICIT) or ()))
        overflow = overflow or bool(holder.get(OVERFLOW))
        if holder.get(FOLDED) is not None:
            folds.append(bytes(holder[FOLDED]))
        folds.extend(bytes(blob) for blob in (holder.get(INLINE) or {}).values())
    for found in itertools.chain(registers, folds):
        if isinstance(found, (bytes, Parts)):
            for part in found.fields if isinstance(found, Parts) else (("", found),):
                blob = hll.decode(part[1])
                if blob.reg is not None:
                    np.maximum(reg, blob.reg, out=reg)
                    overflow = True
            continue
        for word, mask in (found or {}).items():
            w, mask = int(word), int(mask)
            for lane in range(LANES):
                rank = ((mask >> (lane * LANE_BITS)) & LANE_MASK).bit_length()
                if rank > reg[w * LANES + lane]:
                    reg[w * LANES + lane] = rank
            overflow = True
    return hashes, reg, overflow


def unlisted_shared(holder: Mapping[str, Any]) -> bool:
    """Whether a holder may have a shared register document it does not list: one written
    before writers listed it (never folded, no registers of its own)."""
    return FOLDED not in holder and INLINE not in holder


def pending(holder: Mapping[str, Any] | None) -> bool:
    """Whether a stored holder has registers to fold: in documents of their own (listed in ``w``,
    or the shared one of :func:`unlisted_shared`), or its partitions' in ``b``."""
    return overflowed(holder) and bool(
        holder and (holder.get(WRITERS) or holder.get(INLINE) or unlisted_shared(holder))
    )


def folded(holder: Mapping[str, Any] | None, registers: Iterable[Registers | None], p: int = P) -> bytes:
    """A holder's folded registers (``f``) with ``registers`` (either form) maxed in: the codec
    bytes a fold sets. The explicit hashes stay in ``x``."""
    _, reg, _ = _gather([holder], registers, p)
    return Sketch(p, reg=reg).encode()


def _folded(reg: np.ndarray, hashes: Iterable[int], p: int = P) -> np.ndarray:  # type: ignore[type-arg]
    """``reg`` with the explicit (signed) ``hashes`` maxed in, ranks capped as the words cap them."""
    for value in hashes:
        index, rank = register_of(unsigned(value), p)
        rank = min(rank, RANK_CAP)
        if rank > reg[index]:
            reg[index] = rank
    return reg


def _words(reg: np.ndarray) -> dict[int, int]:  # type: ignore[type-arg]
    """The shared form's words of registers (ranks past :data:`RANK_CAP` kept at it)."""
    words: dict[int, int] = {}
    for i in np.flatnonzero(reg):
        word, lane = divmod(int(i), LANES)
        thermometer = (1 << min(int(reg[i]), RANK_CAP)) - 1
        words[word] = words.get(word, 0) | thermometer << (lane * LANE_BITS)
    return words


def union(
    holders: Iterable[Mapping[str, Any] | None],
    registers: Iterable[Registers | None] = (),
    explicit_max: int = EXPLICIT_MAX,
    p: int = P,
) -> tuple[dict[str, Any], dict[int, int]]:
    """One holder that is the union of stored holders and their registers (a site's rollup
    rebuilt from its pages): explicit while every part is and the union has at most
    ``explicit_max`` hashes; otherwise the overflow mark and every hash in the register words
    returned (a rebuilt holder's ``x`` then stays empty, and its size bounded)."""
    hashes, reg, overflow = _gather(holders, registers, p)
    if not overflow and len(hashes) <= explicit_max:
        return {EXPLICIT: [explicit_chunk(hashes)] if hashes else []}, {}
    return {OVERFLOW: True}, _words(_folded(reg, hashes, p))


def estimate(
    holders: Iterable[Mapping[str, Any] | None],
    registers: Iterable[Registers | None] = (),
    p: int = P,
) -> Estimate:
    """The distinct count of the union of stored holders and of register documents (either form;
    absent ones count nothing)."""
    hashes, reg, overflow = _gather(holders, registers, p)
    if not overflow:
        return Estimate(len(hashes), True)
    return Estimate(round(Sketch(p, reg=_folded(reg, hashes, p)).estimate()), False)
