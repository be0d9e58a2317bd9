"""Helpers every ``preagg`` subcommand shares, the kinds' own included: settings, times, ids, output."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from pipeline.settings import Settings

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

_REL = re.compile(r"^now(?:([+-])(\d+)([smhdw]))?$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

T = TypeVar("T")
Db: TypeAlias = "AsyncDatabase[dict[str, Any]]"


class UsageError(ValueError):
    """A mistake in a command's arguments: ``preagg`` prints it as one line and exits 2."""


def parse_time(text: str, now: datetime | None = None, local: bool = False) -> datetime:
    """``now``, ``now-60m``, ``now-2d``, an ISO date or datetime (UTC unless an offset is given).

    ``local``: an ISO time without offset stays naive, the site's wall-clock time
    (hits queries resolve it in the site's zone). A text that is none of these is a
    :class:`UsageError` naming it (``--from 2015-13-45`` printed a traceback).
    """
    now = now or datetime.now(UTC)
    m = _REL.match(text.strip())
    if m:
        sign, n, unit = m.groups()
        delta = timedelta(**{_UNITS[unit]: int(n)}) if n else timedelta()
        return now + delta if sign == "+" else now - delta
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:  # the shapes accepted, then why this one is not
        raise UsageError(
            f"{text!r} is not a time (now, now-60m, YYYY-MM-DD[THH:MM[+HH:MM]]): {exc}"
        ) from None
    if local:
        return dt
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


def command_settings(resolve: bool = True) -> Settings:
    """The environment's settings, with the embedded services' URLs filled in when none is set."""
    from pipeline.services import resolve as resolve_urls

    s = Settings.from_env()
    return resolve_urls(s) if resolve else s


def on_db(s: Settings, query: Callable[[Db], Awaitable[T]], primary_reads: bool = False) -> T:
    """Run one async query against the configured database, then close the client.

    ``primary_reads``: read from the primary whatever the URL says (operator commands
    about ledgers); analysts' queries keep the URL's read preference.
    """
    from pipeline.store.client import mongo_client, primary, reach

    async def run() -> T:
        client = mongo_client(s.mongo_url or "")
        try:
            await reach(client, s.connect_timeout)
            return await query(primary(client, s.db) if primary_reads else client[s.db])
        finally:
            await client.close()

    return asyncio.run(run())


def parse_id(text: str) -> int | str:
    """A user or item id from the command line: digits are an integer id, anything else a string."""
    return int(text) if text.isdigit() and len(text) < 10 else text


def json_rows(rows: list[tuple[Any, Any]], header: tuple[str, str]) -> list[dict[str, Any]]:
    """Two-column rows as JSON objects named by ``header`` (the CLI's ``--json`` and the HTTP API's)."""
    return [{header[0]: a, header[1]: b} for a, b in rows]


#: Control characters (C0, DEL, C1) and bidirectional overrides, shown escaped.
_UNPRINTABLE = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


def printable(value: object) -> str:
    """``value`` as text safe for a terminal: control characters and bidi overrides escaped.

    Site names, pages and property values come from producers: printed raw, an escape
    sequence in one could rewrite the operator's screen or title, or hide a row.
    """
    return str(value).translate(_UNPRINTABLE)


def print_rows(rows: list[tuple[Any, Any]], as_json: bool, header: tuple[str, str]) -> None:
    """Two-column rows as JSON objects or an aligned table (text escaped: :func:`printable`)."""
    if as_json:
        print(json.dumps(json_rows(rows, header)))
        return
    print(f"{header[0]:>20}  {header[1]}")
    for a, b in rows:
        print(f"{printable(a):>20}  {printable(b)}")


def unreachable(exc: BaseException, s: Settings) -> str | None:
    """One line for a store or broker that did not answer (``None``: ``exc`` is something else).

    PyMongo's and aiokafka's tracebacks run to 40-90 lines; the operator needs the URL
    (password hidden) and what to check.
    """
    from pymongo.errors import ConnectionFailure

    from pipeline.settings import redact_url

    if isinstance(exc, ConnectionFailure):
        where = redact_url(s.mongo_url) if s.mongo_url else "the embedded store (preagg services up)"
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return (
            f"MongoDB at {where} did not answer within {s.connect_timeout:g}s ({first}); "
            "check that it runs and PREAGG_MONGO_URL (and PREAGG_CONNECT_TIMEOUT)"
        )
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
        where = s.kafka_url or "the embedded broker (preagg services up)"
        return f"Kafka at {where} did not answer ({exc}); check that it runs and PREAGG_KAFKA_URL"
    return None
