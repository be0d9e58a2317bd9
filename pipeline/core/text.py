"""Rows and producer-supplied text as a terminal or a JSON answer shows them (pure)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

#: Control characters (C0, DEL, C1) and bidirectional overrides, shown escaped.
_UNPRINTABLE = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


def json_rows(rows: list[tuple[Any, Any]], header: tuple[str, str]) -> list[dict[str, Any]]:
    """Two-column rows as JSON objects named by ``header`` (the CLI's ``--json`` and the HTTP API's)."""
    return [{header[0]: a, header[1]: b} for a, b in rows]


def printable(value: object) -> str:
    """``value`` as text safe for a terminal: control characters and bidi overrides escaped.

    Site names, pages and property values come from producers: printed raw, an escape
    sequence in one could rewrite the operator's screen or title, or hide a row.
    """
    return str(value).translate(_UNPRINTABLE)


def csv_text(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """Rows as CSV with a header line (RFC 4180 quoting; text as it is, for a file or a spreadsheet)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return out.getvalue()


def print_rows(
    rows: list[tuple[Any, Any]], as_json: bool, header: tuple[str, str], as_csv: bool = False
) -> None:
    """Two-column rows as JSON objects, CSV or an aligned table (text escaped: :func:`printable`)."""
    if as_json:
        print(json.dumps(json_rows(rows, header)))
        return
    if as_csv:
        print(csv_text(rows, header), end="")
        return
    print(f"{header[0]:>20}  {header[1]}")
    for a, b in rows:
        print(f"{printable(a):>20}  {printable(b)}")
