"""Parser of the Apache/NGINX combined (and common) log format.

``host ident user [time] "request" status bytes ["referrer" "user agent"]``. A line
that does not match is refused with a reason (the caller adds the line number),
never guessed at.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime
from urllib.parse import urlsplit

from pipeline.core.errors import InputError

_Q = r'"((?:[^"\\]|\\.)*)"'
_LINE = re.compile(
    r"^(\S+) (\S+) (\S+) \[([^\]]+)\] " + _Q + r" (\d{3}|-) (\d+|-)(?: " + _Q + " " + _Q + r")?\s*$"
)


class ClfError(InputError):
    """The line is not in combined log format; the message says where it breaks."""


_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
#: Epoch seconds of the UTC midnight of each ``dd/Mon/yyyy`` seen (a log has few days).
_DAYS: dict[str, int] = {}


def clf_time(when: str) -> float:
    """``17/May/2015:10:05:03 +0000`` → epoch seconds.

    ``strptime`` took a third of a shipped line's decoding (measured, docs/benchmarks.md):
    the fixed layout is read by position, each day's midnight computed once; anything
    off the layout goes through ``strptime`` and its error.
    """
    if len(when) == 26 and when[2] == "/" and when[6] == "/" and when[11] == ":" and when[20] == " ":
        midnight = _DAYS.get(when[:11])
        if midnight is None:
            month = _MONTHS.get(when[3:6])
            if month is not None and when[:2].isdigit() and when[7:11].isdigit():
                try:
                    midnight = calendar.timegm(date(int(when[7:11]), month, int(when[:2])).timetuple())
                except ValueError:
                    midnight = None
                if midnight is not None and len(_DAYS) < 100_000:
                    _DAYS[when[:11]] = midnight
        clock, zone = when[12:20], when[21:]
        if (
            midnight is not None
            and clock[2] == ":"
            and clock[5] == ":"
            and zone[0] in "+-"
            and (digits := clock[:2] + clock[3:5] + clock[6:] + zone[1:]).isdigit()
        ):
            h, m, sec = int(digits[:2]), int(digits[2:4]), int(digits[4:6])
            oh, om = int(digits[6:8]), int(digits[8:10])
            if h < 24 and m < 60 and sec < 61 and om < 60:
                offset = (oh * 3600 + om * 60) * (-1 if zone[0] == "-" else 1)
                return float(midnight + h * 3600 + m * 60 + sec - offset)
    try:
        return datetime.strptime(when, "%d/%b/%Y:%H:%M:%S %z").timestamp()
    except ValueError:
        raise ClfError(f"bad time {when!r}") from None


@dataclass(frozen=True, slots=True)
class ClfRecord:
    """The fields of one access-log line that the pipeline uses."""

    ts: float
    method: str
    path: str
    status: int | None
    referrer: str
    agent: str
    #: The client address (a visitor's, with ``agent``: docs/visitors.md).
    host: str = "-"


def parse_line(line: str) -> ClfRecord:
    """One log line → :class:`ClfRecord`."""
    m = _LINE.match(line)
    if m is None:
        if line.count('"') % 2:
            raise ClfError("unbalanced quotes")
        raise ClfError("not in combined log format")
    host, _ident, _user, when, request, status, _size, referrer, agent = m.groups()
    ts = clf_time(when)
    parts = request.split(" ")
    if len(parts) not in (2, 3) or not parts[1]:
        raise ClfError(f"bad request {request[:80]!r}")
    path = parts[1]
    if "://" in path:  # absolute-form request target (proxies)
        path = urlsplit(path).path or "/"
    return ClfRecord(
        ts=ts,
        method=parts[0],
        path=path,
        status=None if status == "-" else int(status),
        referrer=referrer or "-",
        agent=agent or "-",
        host=host,
    )


#: The family of crawlers, monitors and feed readers (the dashboard's bot filter).
BOT_FAMILY = "Bot"

_AGENTS = [
    (re.compile(r"bot|crawl|spider|slurp|feed|monitor", re.I), BOT_FAMILY),
    (re.compile(r"Edg(e|A|iOS)?/"), "Edge"),
    (re.compile(r"OPR/|Opera"), "Opera"),
    (re.compile(r"Chrome/|CriOS/"), "Chrome"),
    (re.compile(r"Firefox/|FxiOS/"), "Firefox"),
    (re.compile(r"MSIE |Trident/"), "IE"),
    (re.compile(r"Safari/"), "Safari"),
    (re.compile(r"^curl/"), "curl"),
    (re.compile(r"^Wget/"), "Wget"),
    (re.compile(r"^(Python|python-requests|Java|Go-http-client|libwww-perl|Ruby)"), "Library"),
]


def agent_family(agent: str) -> str:
    """Browser family of a user-agent string (first matching rule; ``Other``, or ``-`` if none sent)."""
    if agent in ("", "-"):
        return "-"
    for rule, family in _AGENTS:
        if rule.search(agent):
            return family
    return "Other"


def clf_props(rec: ClfRecord) -> dict[str, str]:
    """Custom properties of a log line: status, method, referrer host, user-agent family."""
    host = urlsplit(rec.referrer).hostname if "://" in rec.referrer else None
    return {
        "status": "-" if rec.status is None else str(rec.status),
        "method": rec.method,
        "referrer": host or "-",
        "agent": agent_family(rec.agent),
    }


def clf_event(rec: ClfRecord, site: str, props: bool) -> dict[str, object]:
    """A log line as a hit event of ``site`` (its properties when ``props``)."""
    event: dict[str, object] = {"site": site, "page": rec.path, "ts": rec.ts}
    # The visitor (pipeline.kinds.hits.visitors): hashed by the worker, never stored as sent.
    if rec.host not in ("", "-"):
        event["ip"] = rec.host
    if rec.agent not in ("", "-"):
        event["ua"] = rec.agent
    if props:
        event["props"] = clf_props(rec)
    return event
