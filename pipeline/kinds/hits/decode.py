"""Decoding of hits: JSON events with custom properties, and access-log lines, bare or shipped (pure)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

from pipeline.core.decode import TimedDecoder
from pipeline.core.fields import event_schema
from pipeline.core.rejection import Rejection
from pipeline.core.shippers import Shipped
from pipeline.kinds.hits.clf import ClfError, clf_event, parse_line
from pipeline.kinds.hits.layout import FOLDER
from pipeline.kinds.hits.pages import PageRules
from pipeline.kinds.hits.site_map import SiteMap
from pipeline.kinds.hits.visitors import VisitorFieldError, identity

Props = tuple[tuple[str, str], ...]
"""A hit's custom properties as (name, value) pairs, values as text."""

Hit = tuple[str, str, float, Props]

Visit = tuple[Hit, str | None] | Rejection
"""A decoded hit and its visitor, or why it is refused."""

#: Answers a decoder shared by two readers keeps for the second (:meth:`HitDecoder.share`).
SHARED_MAX = 50_000


def prop_text(value: object) -> str:
    """A property value as counted: strings as they are, numbers and booleans as JSON text."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _oversize(name: str, value: str, limit: int) -> str | None:
    """Which of a property's name and value is over ``limit`` UTF-8 bytes, if any (for the rejection)."""
    for what, text in (("name", name), ("value", value)):
        if len(text.encode("utf-8", "surrogatepass")) > limit:
            return f"property {what} {text[:40]!r}..."
    return None


class HitDecoder(TimedDecoder):
    """One line → :data:`Hit` ``(site, page, ts, props)``, or a :class:`Rejection`.

    Besides JSON events it reads access-log lines (combined or common format), bare or
    in a shipper's envelope: the line gives page and time, ``sites`` the site.
    """

    def __init__(
        self,
        max_bytes: int,
        future_skew: float,
        clock: Callable[[], float] = time.time,
        max_props: int = 32,
        max_prop_bytes: int = 128,
        fmt: str = "event",
        sites: SiteMap | None = None,
        clf_props: bool = False,
        pages: PageRules | None = None,
        visitors: bool = True,
    ) -> None:
        super().__init__("hit", event_schema(FOLDER), ("site", "page"), max_bytes, future_skew, clock, fmt)
        self.max_props = max_props
        self.max_prop_bytes = max_prop_bytes
        self.sites = sites or SiteMap()
        self.clf_props = clf_props
        #: Page normalisation (query strings, trailing slashes, escapes).
        self.pages = pages or PageRules()
        #: Whether :meth:`decode_visit` reads the visitor (``PREAGG_HITS_VISITORS``).
        self.visitors = visitors
        #: Answers kept for the second reader of the same records (:meth:`share`).
        self._kept: OrderedDict[tuple[bytes, float], Visit] | None = None

    def share(self) -> None:
        """Two readers decode every record, one after the other (the site rollups flushed ahead
        of the pages): the first one's answers are kept, by line and decision instant, for the
        second to take instead of decoding again. Decoding is a pure function of both (each
        reader decides with the record's own Kafka time), so the answer is the same. Bounded:
        past :data:`SHARED_MAX` kept answers the oldest are dropped, and decoded again."""
        self._kept = OrderedDict()

    def event_of_line(self, shipped: Shipped, raw: bytes) -> dict[str, Any] | Rejection:
        """A JSON event (its site from the map when it has none) or an access-log line as an event."""
        line = shipped.line.strip()
        if line.startswith(b"{"):
            obj = super().event_of_line(shipped, raw)
            if not isinstance(obj, Rejection) and "site" not in obj:
                site = self.sites.site(shipped)
                if site is not None:
                    obj["site"] = site
            return obj
        try:
            rec = parse_line(line.decode("utf-8", errors="replace"))
        except ClfError as exc:
            return Rejection("clf", f"{shipped.source} line: {exc}", raw)
        site = self.sites.site(shipped)
        if site is None:
            return Rejection("site", self.sites.explain(shipped), raw)
        return clf_event(rec, site, self.clf_props)

    def decode(self, raw: bytes) -> Hit | Rejection:
        """The hit, or why it is refused."""
        got = self.decode_visit(raw)
        return got if isinstance(got, Rejection) else got[0]

    def decode_visit(self, raw: bytes) -> Visit:
        """The hit and its visitor (:func:`~pipeline.kinds.hits.visitors.identity`; ``None``:
        unknown, or a crawler), or why it is refused."""
        kept = self._kept
        if kept is None:
            return self._decode_visit(raw)
        key = (raw, self.clock())
        got = kept.pop(key, None)
        if got is None:
            got = kept[key] = self._decode_visit(raw)
            if len(kept) > SHARED_MAX:
                kept.popitem(last=False)
        return got

    def _decode_visit(self, raw: bytes) -> Visit:
        got = self.decode_event(raw)
        if isinstance(got, Rejection):
            return got
        obj, ts = got
        try:
            who = identity(obj) if self.visitors else None
        except VisitorFieldError as exc:
            return Rejection("visitor", str(exc), raw)
        hit = self._hit(obj, ts, raw)
        return hit if isinstance(hit, Rejection) else (hit, who)

    def _hit(self, obj: dict[str, Any], ts: float, raw: bytes) -> Hit | Rejection:
        given = obj.get("props")
        page = self.pages(obj["page"])
        if not given:
            return obj["site"], page, ts, ()
        if len(given) > self.max_props:
            return Rejection("props", f"{len(given)} properties > limit {self.max_props}", raw)
        limit = self.max_prop_bytes
        quarter = limit // 4  # UTF-8 takes at most 4 bytes a character: shorter text needs no encoding
        props = []
        for name, value in given.items():
            text = value if value.__class__ is str else prop_text(value)
            if (len(name) > quarter or len(text) > quarter) and (over := _oversize(name, text, limit)):
                return Rejection("props", f"{over} over {limit} bytes", raw)
            props.append((name, text))
        return obj["site"], page, ts, tuple(props)
