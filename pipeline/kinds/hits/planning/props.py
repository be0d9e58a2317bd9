"""Custom properties' counts into the daily documents every counted hit touches: the page's
day (unless refused by the page cap) and its site's day."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.core.calendar import SLOT
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.planning.inputs import PropKeySource, SlotKey


def plan_props(
    docs: Touched, props: Mapping[SlotKey, Mapping[tuple[str, str], int]], prop_keys: PropKeySource
) -> None:
    """Each (name, value) count under its resolved keys (name-store tokens), by local day."""
    fd = docs.fields.daily
    for (site, page, slot), pairs in props.items():
        cal = docs.calendars.calendar(site)
        ordinal, start = cal.day_of(slot * SLOT)
        targets = [docs.site_day(site, cal, ordinal, start)]
        if docs.admits(site, page, ordinal):
            targets.append(docs.page_day(site, page, cal, ordinal, start))
        for (name, value), n in pairs.items():
            nk, vk = prop_keys.keys(site, name, value)
            for upd in targets:
                upd.add(f"{fd.props}.{nk}.{vk}", n)
