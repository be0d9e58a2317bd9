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
from pathlib import Path
from typing import IO, Any

from pipeline.core.decode import guarded
from pipeline.core.rejection import Rejection
from pipeline.core.shippers import SHIPPERS, envelope


@dataclass(frozen=True, slots=True)
class Accepted:
    """A valid event ready to send (``key`` ``None``: a keyless message)."""

    raw: bytes
    key: bytes | None


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
        event = guarded(decode, line)
        if isinstance(event, Rejection):
            yield Refused(name, no, event.reason, event.detail)
        else:
            yield Accepted(line, key(event))


#: How ``preagg produce --as`` sends file lines: ``event`` (checked events, keyed, packed),
#: ``line`` (the bare line) or a shipper's envelope; all but ``event`` keyless.
SEND_AS = ("event", "line", *SHIPPERS)


def shipped(paths: Iterable[str], send_as: str, host: str, clock: Callable[[], float]) -> Iterator[Record]:
    """File lines exactly as a log shipper sends them: unchecked, keyless, one per line.

    Checking is the worker's job here, as with a real shipper: a bad line becomes a dead letter.
    """
    for name, _, line in lines(paths):
        if send_as == "line":
            yield Accepted(line, None)
        else:
            path = name if name == "<stdin>" else str(Path(name).resolve())
            text = line.decode("utf-8", errors="replace")
            yield Accepted(envelope(text, send_as, clock(), host, path), None)
