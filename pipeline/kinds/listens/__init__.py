"""Listens: per (user, tag) HyperLogLog sketches of distinct songs by weekday, and a "heard" filter.

Settings ``PREAGG_LISTENS_*``; event schema and field names in ``schemas/listens/``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.fields import FieldMode, Index, View
from pipeline.core.routes import Route
from pipeline.kinds.kind import Kind, Stream, StreamContext
from pipeline.kinds.listens import cli, layout
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.files import read_lastfm
from pipeline.kinds.listens.settings import KEY, ListensSettings
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase


class Listens(Kind[ListensSettings]):
    """The listens kind."""

    name = KEY.name
    settings_type = ListensSettings
    folder = layout.FOLDER
    formats = ("jsonl", "lastfm")
    readers = MappingProxyType({"lastfm": read_lastfm})
    about = "listens: JSON lines {user, tag, song, ts}, or Last.fm user_taggedartists.dat"

    def decoder(self, settings: Settings, s: ListensSettings) -> ListenDecoder:
        d = ListenDecoder(settings.max_event_bytes, settings.future_skew, fmt=self.input_format(s))
        d.lateness = s.lateness
        return d

    def stream(self, ctx: StreamContext, s: ListensSettings) -> Stream:
        from pipeline.kinds.listens.aggregate import ListenSketches  # its libraries load with a worker only

        decoder = self.decoder(ctx.settings, s)
        decoder.clock = ctx.clock
        heard = s.heard()
        # Sketches are merged read-modify-write: one transaction per batch (Stream.writes).
        return Stream(lambda: ListenSketches(decoder, s.hll_precision, heard, ctx.mode), writes="transaction")

    def indexes(self, mode: FieldMode) -> list[Index]:
        return layout.indexes(mode)

    def views(self, mode: FieldMode) -> list[View]:
        from pipeline.kinds.listens.views import views

        return views(mode)

    async def prepare(self, db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> list[str]:
        from pipeline.kinds.listens import summaries

        return await summaries.prepare(db, mode)

    async def unprepared(self, db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> list[str]:
        from pipeline.kinds.listens import summaries

        if await summaries.built(db):
            return []
        return [f"top-tags summaries ({layout.top_fields(mode)['collection']})"]

    def query_commands(self) -> tuple[QueryCommand, ...]:
        return cli.query_commands()

    def api_routes(self, settings: Settings) -> list[Route]:
        from pipeline.kinds.listens import api

        return api.routes(settings)


KIND = Listens()
