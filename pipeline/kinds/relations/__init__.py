"""User–item relations: per user a Bloom filter of its items, per item one of its users.

Settings ``PREAGG_RELATIONS_*``; event schema and field names in ``schemas/relations/``.
"""

from __future__ import annotations

from types import MappingProxyType

from pipeline.core.cli_params import QueryCommand
from pipeline.core.fields import FieldMode, Index, View
from pipeline.core.routes import Route
from pipeline.kinds.kind import Kind, Stream, StreamContext
from pipeline.kinds.relations import cli, layout
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.kinds.relations.files import read_movielens
from pipeline.kinds.relations.settings import KEY, RelationsSettings
from pipeline.settings import Settings


class Relations(Kind[RelationsSettings]):
    """The relations kind."""

    name = KEY.name
    settings_type = RelationsSettings
    folder = layout.FOLDER
    formats = ("jsonl", "movielens")
    readers = MappingProxyType({"movielens": read_movielens})
    about = "relations: JSON lines {user, item}, or MovieLens u.data (rating >= 4)"

    def decoder(self, settings: Settings, s: RelationsSettings) -> RelationDecoder:
        return RelationDecoder(settings.max_event_bytes, self.input_format(s))

    def stream(self, ctx: StreamContext, s: RelationsSettings) -> Stream:
        from pipeline.kinds.relations.aggregate import (
            RelationFilters,  # its libraries load with a worker only
        )

        decoder = self.decoder(ctx.settings, s)
        sides = layout.relation_sides(s.user_capacity, s.item_capacity, s.fpr, ctx.mode)
        return Stream(lambda: RelationFilters(decoder, sides))

    def indexes(self, mode: FieldMode) -> list[Index]:
        return layout.indexes(mode)

    def views(self, mode: FieldMode) -> list[View]:
        from pipeline.kinds.relations.views import views

        return views(mode)

    def query_commands(self) -> tuple[QueryCommand, ...]:
        return cli.query_commands()

    def api_routes(self, settings: Settings) -> list[Route]:
        from pipeline.kinds.relations import api

        return api.routes(settings)


KIND = Relations()
