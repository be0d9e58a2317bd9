"""Deterministic synthetic web traffic with known truth (pure).

Several sites, Zipf-distributed pages, a day/night cycle over a few days ending at
``end``, a share of late (out-of-order) events, and a share of bad lines of every
kind the worker must dead-letter. The generator returns the exact expected counts
alongside the lines, so the demo and tests can check the pipeline to the event.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import orjson

from pipeline.kinds.hits.files import hit_key

SITES = ("shop.example", "blog.example", "docs.example")
BAD_KINDS = ("invalid_json", "schema", "bad_time", "future")
COUNTRIES = ("US", "DE", "FR", "GB", "JP", "BR", "IN")
COUNTRY_W = (0.35, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1)
DEVICES = ("desktop", "mobile", "tablet")


@dataclass
class Traffic:
    """Lines in send order with their keys, and the truth they must produce."""

    lines: list[tuple[bytes, bytes]] = field(default_factory=list)
    per_minute: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    bad: Counter[str] = field(default_factory=Counter)
    #: Hits per (site, property name, value), when the traffic carries properties.
    props: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: The visitors of each (site, UTC day), when the traffic names them.
    visitors: dict[tuple[str, date], set[str]] = field(default_factory=dict)
    #: With visitors: every valid hit as (site, page, time, visitor), in event-time order.
    identified: list[tuple[str, str, float, str]] = field(default_factory=list)

    @property
    def valid(self) -> int:
        """Number of valid events."""
        return sum(self.per_minute.values())


def _pages(rng: random.Random, n: int) -> list[str]:
    words = [
        "index.html",
        "products",
        "cart",
        "search",
        "about",
        "blog/post",
        "docs/api",
        "img/logo.png",
        "css/site.css",
        "js/app.js",
        "help",
        "contact",
    ]
    pages = ["/", "/index.html"]
    while len(pages) < n:
        pages.append(f"/{rng.choice(words)}/{len(pages)}")
    return pages


def generate(
    events: int,
    end: float,
    days: float = 3,
    seed: int = 7,
    late_share: float = 0.05,
    bad_share: float = 0.003,
    pages_per_site: int = 40,
    props: bool = False,
    visitors: int = 0,
) -> Traffic:
    """``events`` valid hits over ``days`` days ending at ``end`` (epoch s), plus bad lines.

    ``props``: most hits carry custom properties (country, device), drawn from a
    random stream of their own, so the hits themselves are the same either way.
    ``visitors``: each hit names one of that many people (``visitor``), from a stream of its own.
    """
    rng = random.Random(seed)
    prng = random.Random(seed + 1)
    vrng = random.Random(seed + 2)
    pages = {s: _pages(rng, pages_per_site) for s in SITES}
    zipf = [1 / (r + 1) ** 1.1 for r in range(pages_per_site)]
    site_w = [0.6, 0.3, 0.1]
    start = end - days * 86400
    times: list[float] = []
    while len(times) < events:  # day/night cycle by rejection sampling
        t = rng.uniform(start, end)
        if rng.random() < 0.55 + 0.45 * math.sin((t % 86400) / 86400 * 2 * math.pi - math.pi / 2):
            times.append(t)
    times.sort()
    out = Traffic()
    delayed: list[tuple[float, bytes, bytes]] = []
    for t in times:
        t = round(t, 3)  # the truth must use the time as sent (a ...59.9996 would round up)
        site = rng.choices(SITES, site_w)[0]
        page = rng.choices(pages[site], zipf)[0]
        ts: float | str = t
        if rng.random() < 0.3:  # some producers send ISO-8601 with an offset
            from pipeline.core.times import utc

            ts = utc(t).isoformat()
        event: dict[str, object] = {"site": site, "page": page, "ts": ts}
        if props and prng.random() < 0.8:
            given = {"country": prng.choices(COUNTRIES, COUNTRY_W)[0], "device": prng.choice(DEVICES)}
            event["props"] = given
            out.props.update((site, name, value) for name, value in given.items())
        if visitors:
            who = event["visitor"] = f"u{vrng.randrange(visitors)}"
            out.visitors.setdefault((site, datetime.fromtimestamp(t, UTC).date()), set()).add(who)
            out.identified.append((site, page, t, who))
        line = orjson.dumps(event)
        out.per_minute[(site, page, int(t // 60))] += 1
        if rng.random() < late_share:  # arrives up to 2 hours late
            delayed.append((t + rng.uniform(60, 7200), line, hit_key(site, page)))
        else:
            out.lines.append((line, hit_key(site, page)))
        if rng.random() < bad_share:
            kind = rng.choice(BAD_KINDS)
            out.bad[kind] += 1
            out.lines.append((bad_line(kind, rng, max(end, time.time())), hit_key(site, page)))
    # interleave the late events at random later positions
    for _due, line, key in delayed:
        out.lines.insert(rng.randint(len(out.lines) // 2, len(out.lines)), (line, key))
    return out


def bad_line(kind: str, rng: random.Random, now: float) -> bytes:
    """One invalid event of the given rejection kind."""
    if kind == "invalid_json":
        return b'{"site": "shop.example", "page": "/x", "ts": '
    if kind == "schema":
        return rng.choice(
            [
                b'{"site": "shop.example", "ts": 1}',
                b'{"site": 5, "page": "/", "ts": 1}',
                b'["not", "an", "object"]',
            ]
        )
    if kind == "bad_time":
        return rng.choice(
            [
                b'{"site": "a", "page": "/", "ts": "yesterday at noon"}',
                b'{"site": "a", "page": "/", "ts": "2020-01-01T10:00:00"}',
            ]
        )
    return orjson.dumps({"site": "a", "page": "/", "ts": now + 86400 * 30})
