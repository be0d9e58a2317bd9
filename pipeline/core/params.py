"""Query parameters of the HTTP API: declared once, parsed into values, described in OpenAPI (pure).

A bad value is a :class:`BadParam` naming the parameter; the server answers it with
400, so a caller knows which of its parameters to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pipeline.core.errors import InputError
from pipeline.core.parse import parse_end, parse_id, parse_time

#: Times an answer may ask about: events are refused outside them (``pipeline.core.times``),
#: and past year 9999 ``datetime`` itself overflows while a series is bucketed.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
#: Longest text a string parameter (or a string in a JSON body) may be.
MAX_TEXT = 2048

#: ``end``: a time, or a bare date naming its whole day (the end of a range: ``to=2015-05-20``).
ParamType = Literal["string", "integer", "time", "end", "date", "id", "choice", "boolean"]


class BadParam(InputError):
    """A query parameter the endpoint cannot take; ``name`` is the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class NotFound(BadParam):
    """A parameter naming something the store does not have (an HTTP 404, exit 2 on the command line)."""


@dataclass(frozen=True)
class Param:
    """One query parameter: its type, whether it is needed, its default (as text) and bounds."""

    name: str
    help: str
    type: ParamType = "string"
    required: bool = False
    #: Parsed like a caller's text, so a relative time (``now-60m``) is resolved per request.
    default: str | None = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    #: On the command line, a flag that sets one value instead of ``--name VALUE``:
    #: ``("--no-bots", "exclude")`` for ``bots`` (the spelling the issues and docs use).
    flag: tuple[str, str] | None = None

    def parse(self, raw: str | None, now: datetime) -> Any:
        """The value of ``raw`` (``None``: absent), or :class:`BadParam`."""
        if raw is None or raw == "":
            if self.required:
                raise BadParam(self.name, "is required")
            if self.default is None:
                return None
            raw = self.default
        if len(raw) > MAX_TEXT:
            raise BadParam(self.name, f"is longer than {MAX_TEXT} characters")
        try:
            value = self._value(raw, now)
        except BadParam:
            raise
        except (ValueError, OverflowError, OSError) as exc:
            raise BadParam(self.name, f"{raw[:80]!r} is not {self._expected()} ({exc})") from None
        if self.type in ("time", "end", "date"):
            check_bounds(self.name, value)
        return value

    def _value(self, raw: str, now: datetime) -> Any:
        if self.type == "time":
            return parse_time_or_ms(raw, now)
        if self.type == "end":
            return parse_time_or_ms(raw, now, end=True)
        if self.type == "date":
            return parse_day(raw, now)
        if self.type == "id":
            return parse_id(raw)
        if self.type == "boolean":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError("expected true or false")
            return raw.lower() in ("true", "1")
        if self.type == "choice":
            if raw not in self.choices:
                raise BadParam(self.name, f"{raw!r} is not one of {', '.join(self.choices)}")
            return raw
        if self.type == "integer":
            n = int(raw)
            if self.minimum is not None and n < self.minimum:
                raise BadParam(self.name, f"{n} is below the minimum {self.minimum}")
            if self.maximum is not None and n > self.maximum:
                raise BadParam(self.name, f"{n} is above the maximum {self.maximum}")
            return n
        return raw

    def _expected(self) -> str:
        return {
            "time": "an ISO time, epoch milliseconds or now[-N(s|m|h|d|w)]",
            "end": "an ISO date (its whole day) or time, epoch milliseconds or now[-N(s|m|h|d|w)]",
            "date": "a date YYYY-MM-DD or today[-N(d|w)]",
            "integer": "an integer",
            "boolean": "true or false",
        }.get(self.type, "valid")

    def schema(self) -> dict[str, Any]:
        """The parameter's OpenAPI schema."""
        out: dict[str, Any]
        if self.type == "integer":
            out = {"type": "integer"}
            if self.minimum is not None:
                out["minimum"] = self.minimum
            if self.maximum is not None:
                out["maximum"] = self.maximum
        elif self.type == "choice":
            out = {"type": "string", "enum": list(self.choices)}
        elif self.type == "date":  # not format: date, which would refuse today-7d
            out = {"type": "string", "pattern": r"^(\d{4}-\d{2}-\d{2}|today(-\d+[dw])?)$"}
        elif self.type == "boolean":
            out = {"type": "boolean"}
        else:
            out = {"type": "string"}
        if self.default is not None:
            out["default"] = (
                int(self.default)
                if self.type == "integer"
                else self.default.lower() in ("true", "1")
                if self.type == "boolean"
                else self.default
            )
        return out


def check_bounds(name: str, value: date) -> None:
    """A time or day between :data:`EARLIEST` and :data:`LATEST`, else a 400 naming ``name``."""
    if isinstance(value, datetime):
        t = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    else:
        t = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not EARLIEST <= t < LATEST:
        raise BadParam(name, f"{value.isoformat()} is outside {EARLIEST.year}..{LATEST.year - 1}")


def parse_time_or_ms(raw: str, now: datetime, end: bool = False) -> datetime:
    """:func:`pipeline.core.parse.parse_time`, plus epoch milliseconds (Grafana's ``${__from}``).

    An ISO time without offset stays naive: the site's wall-clock time. ``end``: a bare
    date is the end of its whole day (:func:`pipeline.core.parse.parse_end`). Whatever the
    text, the only exception is ``ValueError`` (``now-99999999999d`` and 23-digit epochs
    overflow ``datetime``).
    """
    try:
        if raw.isdigit() and len(raw) >= 10:
            return datetime.fromtimestamp(int(raw) / 1000, UTC)
        return (parse_end if end else parse_time)(raw, now, local=True)
    except (OverflowError, OSError) as exc:
        raise ValueError(f"out of range ({exc})") from None


class RelativeDay(date):
    """``today`` or ``today-7d`` as parsed: the UTC date, and how far from today it was asked.

    A query about a site in a time zone takes today in that zone instead (:meth:`local`).
    """

    offset: timedelta

    def local(self, today: date) -> date:
        """The same distance from the site's ``today``."""
        return today + self.offset


def parse_day(raw: str, now: datetime) -> date:
    """A day: ``YYYY-MM-DD``, ``today`` or ``today-7d`` (the dashboard's default ranges)."""
    if raw.startswith("today"):
        utc_day = parse_time_or_ms("now" + raw[5:], now).astimezone(UTC).date()
        out = RelativeDay(utc_day.year, utc_day.month, utc_day.day)
        out.offset = utc_day - now.astimezone(UTC).date()
        return out
    return date.fromisoformat(raw)


def local_day(day: date, today: date) -> date:
    """``day`` as asked of a site whose date now is ``today`` (only ``today±N`` moves)."""
    return day.local(today) if isinstance(day, RelativeDay) else day


def parse_params(params: Sequence[Param], query: Mapping[str, str], now: datetime) -> dict[str, Any]:
    """Every declared parameter's value from a request's query; an undeclared one is refused.

    Refusing unknown names catches typos (``?form=``) that would otherwise silently
    fall back to a default range.
    """
    known = {p.name for p in params}
    for name in query:
        if name not in known:
            raise BadParam(name, f"unknown parameter (this endpoint takes {', '.join(sorted(known))})")
    return {p.name: p.parse(query.get(p.name), now) for p in params}


def one_of(values: Mapping[str, Any], names: Sequence[str]) -> str:
    """The one of ``names`` that is set; :class:`BadParam` when none or several are."""
    given = [n for n in names if values.get(n) is not None]
    if len(given) != 1:
        raise BadParam(names[0] if not given else given[1], f"give exactly one of {', '.join(names)}")
    return given[0]


def exactly_one(*names: str) -> Callable[[Mapping[str, Any]], None]:
    """A route check: exactly one of ``names`` is given."""

    def check(values: Mapping[str, Any]) -> None:
        one_of(values, names)

    return check
