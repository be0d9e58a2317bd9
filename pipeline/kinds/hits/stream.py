"""What a worker runs for hits: the aggregator, the name store, sites' zones, the retention
schedule, the sealing of settled top pages, the folding of settled visitor registers, the
visitor numbers stored beside their sketches."""

from __future__ import annotations

import asyncio
import logging
from datetime import date
from typing import Any

from pipeline.core.uniques import Budget
from pipeline.kinds.hits import layout
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.budget import values_per_name
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.families import PAGES, SITES
from pipeline.kinds.hits.props import PropKeys, namespace_limit
from pipeline.kinds.hits.salt import VisitorKeys
from pipeline.kinds.hits.settings import HitsSettings
from pipeline.kinds.hits.sites.cache import SiteConfigs
from pipeline.kinds.hits.sites.caps import PageCaps
from pipeline.kinds.hits.sites.caps_read import caps_metrics, seed_caps
from pipeline.kinds.hits.sites.fold import VisitorFolder, fold_metrics
from pipeline.kinds.hits.sites.schedule import RetentionSchedule, retention_metrics
from pipeline.kinds.hits.sites.seal import TopSealer, seal_metrics
from pipeline.kinds.hits.sites.settle import Settler
from pipeline.kinds.hits.sites.tiers import Tiers
from pipeline.kinds.hits.visit_stage import VisitsAggregate, VisitStage
from pipeline.kinds.hits.visitor_counts import VisitorCounter, count_metrics
from pipeline.kinds.kind import Stream, StreamContext
from pipeline.settings import SettingsError
from pipeline.store.names import NameCache, NameStore
from pipeline.store.names.metrics import name_store_metrics

log = logging.getLogger("preagg.worker")


def hits_stream(ctx: StreamContext, s: HitsSettings, decoder: HitDecoder) -> Stream:
    """The hits stream of one worker (``Hits.stream``)."""
    values = values_per_name(s, ctx.mode)
    if values < 1:
        raise SettingsError(
            f"PREAGG_HITS_PROPS_MAX_DOC_BYTES={s.props_max_doc_bytes} leaves no room for values of "
            f"{s.props_max_names} properties (PREAGG_HITS_PROPS_MAX_NAMES) in {ctx.mode} mode"
        )
    if values < s.props_max_values:
        log.info(
            "custom properties: at most %d values per property (%s field names, %d properties, "
            "%d bytes per document)",
            values,
            ctx.mode,
            s.props_max_names,
            s.props_max_doc_bytes,
        )
    limit = namespace_limit(s.props_max_names, values, s.props_max_sites)
    names = NameCache(
        NameStore(ctx.db, ctx.mode, ctx.settings.read_chunk),
        limit,
        s.name_store_doc_cap,
        s.name_cache_namespaces,
    )
    prop_keys = PropKeys(names, ctx.mode)
    fields = layout.hits_fields(ctx.mode)

    sites = SiteConfigs(ctx.db)
    visitor_keys = VisitorKeys(ctx.db, daily=s.visitor_salt == "daily")
    visitor_budget = Budget()

    def key_of(ordinal: int) -> bytes:
        return visitor_keys.key(date.fromordinal(ordinal))

    caps = PageCaps(s.max_pages_per_day, s.top_pages_bytes)
    schedule = RetentionSchedule(
        ctx.db,
        fields,
        Tiers(s.retention_minute_days, s.retention_hour_days),
        s.retention_every,
        ctx.settings.worker_id,
    )

    sealer = TopSealer(
        ctx.db,
        fields,
        s.top_pages_bytes,
        caps,
        settle=s.top_pages_seal_after,
        open_every=s.top_pages_seal_open_every,
    )

    settlers: list[Settler] = [sealer] if s.top_pages_seal_after > 0 else []
    folder = VisitorFolder(ctx.db, fields, settle=s.visitors_fold_after)
    if s.visitors and s.visitors_fold_after > 0:
        settlers.append(folder)
    counter = VisitorCounter(ctx.db, fields)
    running: list[Settler] = [*settlers, counter] if s.visitors else settlers

    async def background() -> None:
        loops = [settler.forever() for settler in running]
        if s.retention_every > 0:
            loops.append(schedule.forever())
        await asyncio.gather(*loops)

    def after_commit(agg: HitCounts) -> None:
        days, months = agg.periods()
        for settler in settlers:
            settler.touched(days, months)
        if s.visitors and agg.visits:
            counter.wrote(agg.visited())

    def on_busy(busy: bool) -> None:
        # Counting a period's pages while the next commit writes them again made half the
        # store's work on keyless log lines with visitors; between two commits of a backlog,
        # the count ran while the next batch filled and then slowed its commit 2.7-fold.
        counter.held = busy

    async def before_plan(agg: HitCounts) -> None:
        await sites.refresh()  # the zones and tiers this flush plans with
        await seed_caps(ctx.db, fields, caps, *agg.periods())  # pages per day, top pages
        if agg.props:
            await prop_keys.resolve(agg.prop_pairs())
        if agg.visits:
            await visitor_keys.load()  # once: the deployment's secret (created by the first worker)

    # Identified hits go to the visits stage from one reader: the site rollups' (the first to
    # flush), else the one stream.
    forwarding = visits_forwarding(ctx, s)
    ahead = None
    if s.rollups_ahead:
        decoder.share()  # both flushers read every record: decoded once
        rollup_caps, rollup_budget = PageCaps(0, s.top_pages_bytes), Budget()

        async def before_rollups(agg: HitCounts) -> None:
            await sites.refresh()
            if agg.props:
                await prop_keys.resolve(agg.prop_pairs())
            if agg.visits:
                await visitor_keys.load()

        ahead = Stream(
            lambda: HitCounts(
                decoder, fields, prop_keys, sites, rollup_caps, key_of, rollup_budget, SITES, s.visits
            ),
            before_plan=before_rollups,
            before_plan_label="sites' zones, name store and visitor secret",
            **forwarding,
        )
    family = PAGES if ahead is not None else None
    return Stream(
        lambda: HitCounts(
            decoder,
            fields,
            prop_keys,
            sites,
            caps,
            key_of,
            visitor_budget,
            family,
            s.visits and ahead is None,
        ),
        before_plan=before_plan,
        before_plan_label="sites' zones, page caps, name store and visitor secret",
        metrics=lambda: [
            *name_store_metrics(names),
            *retention_metrics(schedule),
            *caps_metrics(caps),
            *seal_metrics(sealer),
            *fold_metrics(folder),
            *count_metrics(counter),
        ],
        background=background,
        after_commit=after_commit if running else None,
        on_busy=on_busy if s.visitors else None,
        ahead=ahead,
        ahead_family=SITES,
        stages=visits_stage(ctx, s, sites) if forwarding else (),
        **({} if ahead is not None else forwarding),
    )


def visits_stage(ctx: StreamContext, s: HitsSettings, sites: SiteConfigs) -> tuple[tuple[str, Stream]]:
    """The visits stage: a stream of the forwarded hits' topic (pipeline/kinds/hits/visit_stage.py)."""
    stage = VisitStage(
        ctx.db,
        ctx.mode,
        ctx.settings.group_id,
        s.visits_topic,
        s.visit_timeout,
        s.visit_grace,
        sites,
        ctx.settings.commit_timeout,
        s.visits_max_open,
    )

    async def before_plan(agg: VisitsAggregate) -> None:
        await sites.refresh()  # the zones that place a visit in its day
        await stage.ready(agg)

    stream = Stream(
        stage.aggregate,
        before_plan=before_plan,
        before_plan_label="sites' zones and the visits state",
        metrics=stage.metrics,
        after_commit=stage.committed,
        whole_messages=True,
        keep=stage.keep,
        flush_interval=s.visits_flush_interval,
    )
    return ((s.visits_topic, stream),)


def visits_forwarding(ctx: StreamContext, s: HitsSettings) -> dict[str, Any]:
    """The :class:`Stream` fields that forward identified hits (``visits``), checked against the
    settings it needs; none when off."""
    if not s.visits:
        return {}
    if not s.visitors:
        raise SettingsError("PREAGG_HITS_VISITS needs PREAGG_HITS_VISITORS: a visit is a visitor's")
    if ctx.settings.commit_mode != "exactly_once":
        raise SettingsError(
            "PREAGG_HITS_VISITS needs PREAGG_COMMIT_MODE=exactly_once: "
            "hits are forwarded once a flush's intent is recorded"
        )
    positive = s.visit_timeout > 0 and s.visits_flush_interval > 0 and s.visits_max_open >= 1
    if not (positive and s.visit_grace >= 0):
        raise SettingsError(
            "PREAGG_HITS_VISIT_TIMEOUT and PREAGG_HITS_VISITS_FLUSH_INTERVAL must be above 0, "
            "PREAGG_HITS_VISIT_GRACE at least 0 and "
            f"PREAGG_HITS_VISITS_MAX_OPEN at least 1 (not {s.visit_timeout}, {s.visits_flush_interval}, "
            f"{s.visit_grace}, {s.visits_max_open})"
        )
    return {"forwarded": HitCounts.visit_hits, "forward_topic": s.visits_topic}
