"""``preagg query related``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pipeline.core.parse import parse_id
from pipeline.core.text import printable
from pipeline.kinds.relations.settings import KEY
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_related(args: argparse.Namespace) -> int:
    """Items related to a user, or users related to an item, through the Bloom filters."""
    from pipeline.kinds.relations.layout import relation_sides
    from pipeline.kinds.relations.query import related_items, related_users

    s = command_settings()
    rs = s.of(KEY)
    sides = relation_sides(rs.user_capacity, rs.item_capacity, rs.fpr, s.schema)

    async def run(db: Db) -> list[Any]:
        if args.user is not None:
            return await related_items(db, parse_id(args.user), sides)
        return await related_users(db, parse_id(args.item), sides)

    found = on_db(s, run)
    if args.json:
        print(json.dumps(found))
    else:
        print("\n".join(printable(x) for x in found))
        print(
            f"{len(found)} found (Bloom filters: false positives possible, false negatives never)",
            file=sys.stderr,
        )
    return 0


def add_queries(qsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The relations kind's ``preagg query`` subcommand."""
    qr = qsub.add_parser("related", help="relations through the Bloom filters (server side)")
    side = qr.add_mutually_exclusive_group(required=True)
    side.add_argument("--user", help="items whose filter contains this user")
    side.add_argument("--item", help="users whose filter contains this item")
    qr.add_argument("--json", action="store_true")
    qr.set_defaults(func=cmd_query_related)
