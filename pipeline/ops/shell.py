"""``preagg mongosh``: the MongoDB shell on the deployment's database, wherever its URL comes from.

Analysts query the views (docs/analysts.md) with the tools they know; this finds
``mongosh`` (on ``PATH``, or where ``make mongosh`` installs it) and connects it to the
database the workers write (``PREAGG_MONGO_URL`` and ``PREAGG_DB``, or the embedded
services of this directory), passing every other argument through.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pipeline.core.errors import InputError

#: Where ``make mongosh`` puts it (npm's ``--prefix``), relative to the checkout.
LOCAL = Path(".venv") / "mongosh" / "node_modules" / ".bin" / "mongosh"


class NoShell(InputError):
    """``mongosh`` is nowhere to be found."""


def find_mongosh(cwd: Path | None = None) -> str:
    """The ``mongosh`` to run: ``PREAGG_MONGOSH``, ``PATH``'s, or the checkout's (``make mongosh``)."""
    named = os.environ.get("PREAGG_MONGOSH")
    if named:
        return named
    found = shutil.which("mongosh")
    if found:
        return found
    here = Path(__file__).resolve().parents[2] / LOCAL
    for candidate in ((cwd or Path.cwd()) / LOCAL, here):
        if candidate.is_file():
            return str(candidate)
    raise NoShell(
        "mongosh not found: `make mongosh` installs it into .venv (npm), or install it from "
        "https://www.mongodb.com/try/download/shell; PREAGG_MONGOSH may name it"
    )


def database_url(url: str, db: str) -> str:
    """``url`` pointing at database ``db`` (its options kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def mongosh_argv(url: str, db: str, args: list[str], cwd: Path | None = None) -> list[str]:
    """The command line that runs the shell on ``db`` with ``args`` after the URL."""
    return [find_mongosh(cwd), database_url(url, db), *args]
