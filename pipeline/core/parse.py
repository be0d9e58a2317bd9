"""Parsers of what people type (times, ids): shared by the CLI and the HTTP API's parameters (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pipeline.core.errors import InputError

_REL = re.compile(r"^now(?:([+-])(\d+)([smhdw]))?$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class UsageError(InputError):
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


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_end(text: str, now: datetime | None = None, local: bool = False) -> datetime:
    """The end of a range as a person means it: a bare date names its whole day.

    ``--to 2015-05-20`` ends with the last minute of that (local) day, at every
    granularity: ``--by hour`` includes the 20th's 24 hours (23 or 25 on a DST day),
    not only its midnight. A time (``2015-05-20T12:00``, ``now``) stays that instant.
    """
    if _DATE.match(text.strip()):
        day = parse_time(text.strip(), now, local)
        return day.replace(hour=23, minute=59, second=59, microsecond=999_999)
    return parse_time(text, now, local)


def parse_id(text: str) -> int | str:
    """A user or item id from the command line: digits are an integer id, anything else a string."""
    return int(text) if text.isdigit() and len(text) < 10 else text
