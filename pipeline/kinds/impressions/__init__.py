"""Impressions (user was shown item): counts per (user, item), per item and per item and day.

Settings ``PREAGG_IMPRESSIONS_*``; event schema and field names in ``schemas/impressions/``.
"""

from __future__ import annotations

from pipeline.core.cli_params import QueryCommand
from pipeline.core.fields import FieldMode, Index, View
from pipeline.core.routes import Route
from pipeline.kinds.impressions import cli, layout
from pipeline.kinds.impressions.decode import ImpressionDecoder
from pipeline.kinds.impressions.settings import KEY, ImpressionsSettings
from pipeline.kinds.kind import Kind, Stream, StreamContext
from pipeline.settings import Settings


class Impressions(Kind[ImpressionsSettings]):
    """The impressions kind."""

    name = KEY.name
    settings_type = ImpressionsSettings
    folder = layout.FOLDER
    about = "impressions: JSON lines {user, item, ts}"

    def decoder(self, settings: Settings, s: ImpressionsSettings) -> ImpressionDecoder:
        d = ImpressionDecoder(settings.max_event_bytes, settings.future_skew, fmt=self.input_format(s))
        d.lateness = s.lateness
        return d

    def stream(self, ctx: StreamContext, s: ImpressionsSettings) -> Stream:
        from pipeline.kinds.impressions.aggregate import (
            ImpressionCounts,  # its libraries load with a worker only
        )

        decoder, fields = self.decoder(ctx.settings, s), layout.impression_fields(ctx.mode)
        decoder.clock = ctx.clock
        return Stream(lambda: ImpressionCounts(decoder, fields))

    def indexes(self, mode: FieldMode) -> list[Index]:
        return layout.indexes(mode)

    def views(self, mode: FieldMode) -> list[View]:
        from pipeline.kinds.impressions.views import views

        return views(mode)

    def query_commands(self) -> tuple[QueryCommand, ...]:
        return cli.query_commands()

    def api_routes(self, settings: Settings) -> list[Route]:
        from pipeline.kinds.impressions import api

        return api.routes(settings)


KIND = Impressions()
