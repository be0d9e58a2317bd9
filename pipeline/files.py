"""Input files for ``preagg produce``, line by line; each kind adds its own formats (pipeline/kinds/).

Each line becomes either an :class:`Accepted` event (bytes to send and its
partition key) or a :class:`Refused` one with its line number and reason. Nothing
is dropped silently: the caller reports refused lines in its summary.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from pipeline.core.rejection import Rejection


@dataclass(frozen=True, slots=True)
class Accepted:
    """A valid event ready to send."""

    raw: bytes
    key: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """A line that is not a valid event."""

    source: str
    line_no: int
    reason: str
    detail: str


@contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdin.buffer
    else:
        with open(path, "rb") as f:
            yield f


@dataclass(frozen=True, slots=True)
class Skipped:
    """A valid line that is not an event by definition (a MovieLens rating below 4)."""

    reason: str


Record = Accepted | Refused | Skipped


def lines(paths: Iterable[str]) -> Iterator[tuple[str, int, bytes]]:
    """(file name, line number, line without its end) of every non-blank line."""
    for path in paths:
        name = "<stdin>" if path == "-" else path
        with _open(path) as f:
            for no, line in enumerate(f, 1):
                line = line.rstrip(b"\r\n")
                if line.strip():
                    yield name, no, line


Decode = Callable[[bytes], tuple[Any, ...] | Rejection]


def read_jsonl(paths: Iterable[str], decode: Decode, key: Callable[[Any], bytes]) -> Iterator[Record]:
    """Events of any kind from JSON-lines files, each checked by ``decode`` and keyed by ``key``."""
    for name, no, line in lines(paths):
        event = decode(line)
        if isinstance(event, Rejection):
            yield Refused(name, no, event.reason, event.detail)
        else:
            yield Accepted(line, key(event))
