"""Web hits: per site/page, counts by minute, hour, day and month, and custom properties.

Everything the kind is lives in this folder: settings (``PREAGG_HITS_*``), decoder,
aggregator, document layout and indexes, file formats and partition key, queries
and CLI subcommands; its event schema and field names in ``schemas/hits/``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from pipeline.core.cli_params import Commands, QueryCommand
from pipeline.core.fields import FieldMode, Index, ShardKey, View, hashed_id
from pipeline.core.routes import Route
from pipeline.core.text import printable
from pipeline.files import Record
from pipeline.kinds.hits import cli, layout
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.files import hit_key, read_hits
from pipeline.kinds.hits.layout import SECRETS_COLLECTION, SITES_COLLECTION
from pipeline.kinds.hits.pages import PageRules, QueryPolicyError
from pipeline.kinds.hits.settings import KEY, HitsSettings
from pipeline.kinds.hits.site_map import SiteMap, SiteMapError
from pipeline.kinds.kind import Kind, Stream, StreamContext
from pipeline.settings import Settings, SettingsError


class Hits(Kind[HitsSettings]):
    """The hits kind."""

    name = KEY.name
    settings_type = HitsSettings
    folder = layout.FOLDER
    formats = ("jsonl", "clf")
    about = "web hits: JSON lines, or access logs (clf)"
    line_formats = ("clf",)
    topic_settings = ("visits_topic",)

    def decoder(self, settings: Settings, s: HitsSettings) -> HitDecoder:
        try:
            sites = SiteMap(s.site, s.site_field, s.site_map)
        except SiteMapError as exc:
            raise SettingsError(str(exc)) from None
        try:
            pages = PageRules.parse(s.query_string, s.lowercase_paths)
        except QueryPolicyError as exc:
            raise SettingsError(str(exc)) from None
        d = HitDecoder(
            settings.max_event_bytes,
            settings.future_skew,
            max_props=s.props_max_per_event,
            max_prop_bytes=s.props_max_bytes,
            fmt=self.input_format(s),
            sites=sites,
            clf_props=s.clf_props,
            pages=pages,
            visitors=s.visitors,
        )
        d.lateness = s.lateness
        return d

    def stream(self, ctx: StreamContext, s: HitsSettings) -> Stream:
        # Imported here: the aggregator, the name store and the retention schedule load
        # PyMongo and prometheus_client, which `preagg --help` and queries never need.
        from pipeline.kinds.hits.stream import hits_stream

        decoder = self.decoder(ctx.settings, s)
        decoder.clock = ctx.clock
        return hits_stream(ctx, s, decoder)

    def collections(self) -> list[str]:
        return [*super().collections(), SITES_COLLECTION, SECRETS_COLLECTION]

    def topics(self, s: HitsSettings) -> list[str]:
        return [s.visits_topic] if s.visits else []

    def shard_keys(self, mode: FieldMode) -> list[ShardKey]:
        return [
            *layout.shard_keys(mode),
            hashed_id(SITES_COLLECTION),
            hashed_id(SECRETS_COLLECTION),
            hashed_id(layout.register_fields(mode).collection),  # a busy sketch's registers: by _id
        ]

    def indexes(self, mode: FieldMode) -> list[Index]:
        return layout.indexes(mode)

    def views(self, mode: FieldMode) -> list[View]:
        from pipeline.kinds.hits.views import views

        return views(mode)

    def key(self, event: Any) -> bytes:
        return hit_key(event[0], event[1])

    def add_produce_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--site", help="site of clf lines (default: file name); fills missing sites")
        parser.add_argument(
            "--props",
            action="store_true",
            help="clf hits: add status, method, referrer host and user-agent family as custom properties",
        )

    def records(
        self, paths: Iterable[str], fmt: str, settings: Settings, s: HitsSettings, args: argparse.Namespace
    ) -> Iterator[Record]:
        return read_hits(
            paths,
            fmt,
            self.decoder(settings, replace(s, format="event", lateness=0.0)),
            args.site,
            args.props,
        )

    def query_commands(self) -> tuple[QueryCommand, ...]:
        return cli.query_commands()

    def add_commands(self, commands: Commands) -> None:
        from pipeline.kinds.hits.sites.commands import add_commands

        add_commands(commands)

    async def status_notes(self, db: Any, settings: Settings) -> list[str]:
        from pipeline.kinds.hits.sites.caps_read import capped_days

        days = await capped_days(db, layout.hits_fields(settings.schema))
        if not days:
            return []
        head = "pages past PREAGG_HITS_MAX_PAGES_PER_DAY (counted in site rollups, no page documents):"
        return [head, *(f"  {printable(d['site'])} {d['day']}: {d['hits']} hits" for d in days)]

    def api_routes(self, settings: Settings) -> list[Route]:
        from pipeline.kinds.hits import api

        return api.routes(settings)


KIND = Hits()
