"""``preagg query impressions``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pipeline.core.parse import parse_id
from pipeline.core.text import print_rows
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_impressions(args: argparse.Namespace) -> int:
    """Impression counts by user, by item, or the top items."""
    from pipeline.kinds.impressions.query import items_of_user, top_items, users_of_item

    s = command_settings()

    async def run(db: Db) -> tuple[list[tuple[Any, int]], tuple[str, str]]:
        if args.user is not None:
            return await items_of_user(db, parse_id(args.user), args.limit, s.schema), ("item", "count")
        if args.item is not None:
            return await users_of_item(db, parse_id(args.item), args.limit, s.schema), ("user", "count")
        return await top_items(db, args.top, args.day, s.schema), ("item", "count")

    rows, header = on_db(s, run)
    print_rows(rows, args.json, header)
    return 0


def add_queries(qsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The impressions kind's ``preagg query`` subcommand."""
    qi = qsub.add_parser("impressions", help="impression counts by user, by item, or the top items")
    who = qi.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="items this user has seen, with counts")
    who.add_argument("--item", help="users who saw this item, with counts")
    who.add_argument("--top", type=int, metavar="N", help="the N most viewed items")
    qi.add_argument("--day", help="with --top: that UTC day (YYYY-MM-DD)")
    qi.add_argument("--limit", type=int, default=0, help="at most this many rows (0: all)")
    qi.add_argument("--json", action="store_true")
    qi.set_defaults(func=cmd_query_impressions)
