"""HyperLogLog sketches with a compact codec: explicit, sparse, dense (pure logic).

Registers and the estimator are datasketch's ``HyperLogLogPlusPlus`` (64-bit
hashes, bias-corrected small-range estimates); what is added here is the storage
form, after postgresql-hll's EXPLICIT / SPARSE / FULL:

* **explicit**: the sorted distinct 64-bit hashes, 8 bytes each, while at most
  :data:`EXPLICIT_MAX` (128); the count is exact (up to hash collisions);
* **sparse**: ``(register index: uint16, rank: uint8)`` for non-zero registers,
  3 bytes each, while smaller than the dense form;
* **dense**: all ``2^p`` registers packed in 6 bits each (3,072 bytes at p = 12).

One header byte holds the form and the precision. Songs are hashed with XXH3-64
(stable across processes). Union is a set union (explicit) or a register-wise
maximum: idempotent and commutative, so replaying a flush changes nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, cast

import numpy as np
import xxhash

if TYPE_CHECKING:
    from datasketch import HyperLogLogPlusPlus

from pipeline.core.ids import Id, id_bytes

EXPLICIT, SPARSE, DENSE = 0, 1, 2
#: Most hashes kept in the explicit form (8 bytes each).
EXPLICIT_MAX = 128
#: Default precision: 4,096 registers, standard error 1.04 / sqrt(4096) = 1.6%.
DEFAULT_P = 12


def song_hash(song: Id) -> int:
    """Stable unsigned 64-bit hash of a song id."""
    return xxhash.xxh3_64_intdigest(id_bytes(song))


@cache
def _hllpp() -> type[HyperLogLogPlusPlus]:
    """datasketch's class, imported when registers are first needed: the package imports
    scipy (its LSH), 0.3 s of every ``preagg query`` start (``-X importtime``), and explicit
    sketches, the common case of a query, never need it."""
    from datasketch import HyperLogLogPlusPlus

    return cast("type[HyperLogLogPlusPlus]", HyperLogLogPlusPlus)


def _identity(x: int) -> int:
    return x


@dataclass
class Sketch:
    """One HLL in either exact (``hashes``) or register (``reg``) state."""

    p: int
    hashes: set[int] | None = None
    reg: np.ndarray | None = None  # type: ignore[type-arg]

    @classmethod
    def empty(cls, p: int = DEFAULT_P) -> Sketch:
        """A sketch of nothing."""
        return cls(p, hashes=set())

    def add_hash(self, h: int) -> None:
        """Add one element by its 64-bit hash."""
        if self.hashes is not None:
            self.hashes.add(h)
            if len(self.hashes) > EXPLICIT_MAX:
                self._to_registers()
        else:
            self._hll().update(h)

    def add(self, song: Id) -> None:
        """Add one element."""
        self.add_hash(song_hash(song))

    def _hll(self) -> HyperLogLogPlusPlus:
        assert self.reg is not None
        hll = _hllpp()(reg=self.reg, hashfunc=_identity)
        self.reg = hll.reg  # shares the array: updates land in self.reg
        return hll

    def _to_registers(self) -> None:
        hll = _hllpp()(p=self.p, hashfunc=_identity)
        for h in self.hashes or ():
            hll.update(h)
        self.reg, self.hashes = hll.reg, None

    def union(self, other: Sketch) -> Sketch:
        """A new sketch of both sets."""
        if self.p != other.p:
            raise ValueError("cannot union sketches of different precisions")
        if self.hashes is not None and other.hashes is not None:
            out = Sketch(self.p, hashes=self.hashes | other.hashes)
            if len(out.hashes or ()) > EXPLICIT_MAX:
                out._to_registers()
            return out
        a, b = self.copy(), other.copy()
        for s in (a, b):
            if s.reg is None:
                s._to_registers()
        assert a.reg is not None and b.reg is not None
        return Sketch(self.p, reg=np.maximum(a.reg, b.reg))

    def copy(self) -> Sketch:
        """An independent copy."""
        if self.hashes is not None:
            return Sketch(self.p, hashes=set(self.hashes))
        assert self.reg is not None
        return Sketch(self.p, reg=self.reg.copy())

    def estimate(self) -> float:
        """Distinct elements: exact while explicit, HLL++ otherwise."""
        if self.hashes is not None:
            return float(len(self.hashes))
        return float(_hllpp()(reg=self.reg, hashfunc=_identity).count())

    # -- codec -------------------------------------------------------------------

    def encode(self) -> bytes:
        """The smallest of the three forms that holds this sketch."""
        if self.hashes is not None:
            return bytes([EXPLICIT << 5 | self.p]) + b"".join(
                struct.pack(">Q", h) for h in sorted(self.hashes)
            )
        assert self.reg is not None
        nz = np.flatnonzero(self.reg)
        dense_size = (len(self.reg) * 6 + 7) // 8
        if 3 * len(nz) < dense_size:
            pairs = np.empty(len(nz), dtype=_SPARSE_PAIR)
            pairs["i"], pairs["r"] = nz, self.reg[nz]
            return bytes([SPARSE << 5 | self.p]) + pairs.tobytes()
        return bytes([DENSE << 5 | self.p]) + _pack6(self.reg)


#: One register of the sparse form: its index (big-endian 16 bits) and its rank (8 bits).
_SPARSE_PAIR = np.dtype([("i", ">u2"), ("r", "u1")])


def decode(data: bytes) -> Sketch:
    """Inverse of :meth:`Sketch.encode`."""
    kind, p = data[0] >> 5, data[0] & 0x1F
    body = data[1:]
    if kind == EXPLICIT:
        return Sketch(p, hashes=set(struct.unpack(f">{len(body) // 8}Q", body)))
    reg = np.zeros(1 << p, dtype=np.int8)
    if kind == SPARSE:
        pairs = np.frombuffer(body, dtype=_SPARSE_PAIR, count=len(body) // 3)
        reg[pairs["i"]] = pairs["r"]
        return Sketch(p, reg=reg)
    if kind == DENSE:
        return Sketch(p, reg=_unpack6(body, 1 << p))
    raise ValueError(f"unknown sketch form {kind}")


def union_all(sketches: Iterable[Sketch], p: int = DEFAULT_P) -> Sketch:
    """Union of any number of sketches (empty for none).

    Explicit sketches are unioned as one set first (top tags unions up to seven
    small slots per tag: one set union instead of a new sketch per slot), then
    whatever holds registers is maxed in.
    """
    hashes: set[int] = set()
    registers: list[Sketch] = []
    for s in sketches:
        if s.p != p:
            raise ValueError("cannot union sketches of different precisions")
        if s.hashes is not None:
            hashes |= s.hashes
        else:
            registers.append(s)
    out = Sketch(p, hashes=hashes)
    if len(hashes) > EXPLICIT_MAX:
        out._to_registers()
    for s in registers:
        out = out.union(s)
    return out


def _pack6(reg: np.ndarray) -> bytes:  # type: ignore[type-arg]
    bits = np.unpackbits(reg.astype(np.uint8)[:, None], axis=1)[:, 2:]  # 6 low bits per register
    return bytes(np.packbits(bits.reshape(-1)))


def _unpack6(body: bytes, m: int) -> np.ndarray:  # type: ignore[type-arg]
    bits = np.unpackbits(np.frombuffer(body, dtype=np.uint8))[: m * 6].reshape(m, 6)
    full = np.concatenate([np.zeros((m, 2), dtype=np.uint8), bits], axis=1)
    return np.packbits(full, axis=1).reshape(m).astype(np.int8)
