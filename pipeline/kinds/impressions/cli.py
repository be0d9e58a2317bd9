"""``preagg query impressions``, made from its declaration (queries.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.params import one_of
from pipeline.core.text import print_rows
from pipeline.kinds.impressions.queries import QUERIES
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_impressions(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Impression counts by user, by item, or the top items."""
    from pipeline.kinds.impressions.query import items_of_user, top_items, users_of_item

    s = command_settings()
    which = one_of(a, ("user", "item", "top"))

    async def run(db: Db) -> tuple[list[tuple[Any, int]], tuple[str, str]]:
        if which == "user":
            return await items_of_user(db, a["user"], a["limit"], s.schema), ("item", "count")
        if which == "item":
            return await users_of_item(db, a["item"], a["limit"], s.schema), ("user", "count")
        day = a["day"].isoformat() if a["day"] is not None else None
        return await top_items(db, a["top"], day, s.schema), ("item", "count")

    rows, header = on_db(s, run)
    print_rows(rows, args.json, header)
    return 0


def query_commands() -> tuple[QueryCommand, ...]:
    """The impressions kind's ``preagg query`` subcommand."""
    return (QueryCommand(QUERIES["impressions"], cmd_query_impressions),)
