"""An example stream kind, as docs/design.md "Adding a stream kind" builds it: revenue per site and day.

Nothing outside this folder knows it; ``PREAGG_KINDS=...,tests.kinds.purchases:KIND``
registers it (a built-in kind would add its name to ``BUILTIN_KINDS`` in ``pipeline/settings.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.decode import TimedDecoder
from pipeline.core.fields import FieldMode, Index, event_schema, field_names
from pipeline.core.ids import escape_part
from pipeline.core.params import Param
from pipeline.core.queries import Query
from pipeline.core.rejection import Rejection
from pipeline.core.routes import Route, rows_of
from pipeline.core.text import json_rows
from pipeline.core.times import day_key
from pipeline.core.updates import DocUpdate
from pipeline.kinds import Kind, Stream, StreamContext
from pipeline.settings import Settings, StreamSettings

FOLDER = Path(__file__).parent / "schema"


@dataclass(frozen=True)
class PurchasesSettings(StreamSettings):
    """``PREAGG_PURCHASES_*``."""

    topic: str = "purchases"


class PurchaseSums:
    """Aggregator: (site, day) → [purchases, cents] for one batch."""

    def __init__(self, decoder: TimedDecoder, fields: dict[str, str]) -> None:
        self.decoder, self.fields = decoder, fields
        self.sums: dict[tuple[str, str], list[int]] = {}

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        got = self.decoder.decode(raw)
        if isinstance(got, Rejection):
            return got
        site, cents, ts = got
        acc = self.sums.setdefault((site, day_key(ts)), [0, 0])
        acc[0] += 1
        acc[1] += cents
        return None

    def __len__(self) -> int:
        return len(self.sums)

    def documents(self) -> int:
        return len(self.sums)

    def plan(self) -> list[DocUpdate]:
        f, out = self.fields, []
        for (site, day), (n, cents) in self.sums.items():
            u = DocUpdate(f["collection"], f"{day}/{escape_part(site)}", {f["site"]: site, f["day"]: day})
            u.add(f["count"], n)
            u.add(f["revenue"], cents)
            out.append(u)
        return out


#: The kind's one query, declared once: ``preagg query purchases`` and ``GET /api/purchases``.
QUERY = Query(
    "purchases",
    "/api/purchases",
    "Revenue of a site per day, in cents",
    (Param("site", "the site", required=True),),
)


async def revenue(db: Any, site: str, mode: FieldMode) -> list[tuple[Any, Any]]:
    """(day, cents) of ``site``, day by day."""
    f = field_names(FOLDER, "purchases_daily", mode)
    docs = db[f["collection"]].find({f["site"]: site}).sort(f["day"], 1)
    return [(d[f["day"]], d[f["revenue"]]) async for d in docs]


def cmd_query_purchases(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    from pipeline.core.text import print_rows
    from pipeline.services.urls import command_settings
    from pipeline.store.command import on_db

    s = command_settings()
    print_rows(on_db(s, lambda db: revenue(db, a["site"], s.schema)), args.json, ("day", "cents"))
    return 0


class Purchases(Kind[PurchasesSettings]):
    name = "purchases"
    settings_type = PurchasesSettings
    folder = FOLDER
    about = "purchases: JSON lines {site, cents, ts}"

    def decoder(self, settings: Settings, s: PurchasesSettings) -> TimedDecoder:
        schema = event_schema(FOLDER)
        return TimedDecoder(
            "purchase", schema, ("site", "cents"), settings.max_event_bytes, settings.future_skew
        )

    def stream(self, ctx: StreamContext, s: PurchasesSettings) -> Stream:
        decoder, fields = self.decoder(ctx.settings, s), field_names(FOLDER, "purchases_daily", ctx.mode)
        return Stream(lambda: PurchaseSums(decoder, fields))

    def indexes(self, mode: FieldMode) -> list[Index]:
        f = field_names(FOLDER, "purchases_daily", mode)
        return [Index(f["collection"], ((f["site"], 1), (f["day"], 1)), "site_day")]

    def key(self, event: Any) -> bytes:
        return str(event[0]).encode()

    def query_commands(self) -> tuple[QueryCommand, ...]:
        return (QueryCommand(QUERY, cmd_query_purchases),)

    def api_routes(self, settings: Settings) -> list[Route]:
        async def handler(db: Any, a: Mapping[str, Any]) -> Any:
            return json_rows(await revenue(db, a["site"], settings.schema), ("day", "cents"))

        return [
            QUERY.route(
                handler, rows_of(("day", {"type": "string"}), ("cents", {"type": "integer"})), self.name
            )
        ]


KIND = Purchases()
