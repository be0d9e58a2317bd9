"""``preagg query related``, made from its declaration (queries.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.params import one_of
from pipeline.core.text import printable
from pipeline.kinds.relations.queries import QUERIES
from pipeline.kinds.relations.settings import KEY
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_related(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Items related to a user, or users related to an item, through the Bloom filters."""
    from pipeline.kinds.relations.layout import relation_sides
    from pipeline.kinds.relations.query import related_items, related_users

    s = command_settings()
    rs = s.of(KEY)
    sides = relation_sides(rs.user_capacity, rs.item_capacity, rs.fpr, s.schema)
    which = one_of(a, ("user", "item"))

    async def run(db: Db) -> list[Any]:
        if which == "user":
            return await related_items(db, a["user"], sides)
        return await related_users(db, a["item"], sides)

    found = on_db(s, run)[: a["limit"]]
    if args.json:
        print(json.dumps(found))
    else:
        print("\n".join(printable(x) for x in found))
        print(
            f"{len(found)} found (Bloom filters: false positives possible, false negatives never)",
            file=sys.stderr,
        )
    return 0


def query_commands() -> tuple[QueryCommand, ...]:
    """The relations kind's ``preagg query`` subcommand."""
    return (QueryCommand(QUERIES["related"], cmd_query_related),)
