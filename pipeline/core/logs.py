"""How preagg's processes log: one line per event, as text or JSON, libraries kept quiet (pure).

A worker started by hand printed about sixty lines of Faust's and aiokafka's INFO
(subscriptions, assignments as ASCII tables, group joins) before its own "ready" line:
an operator could not see preagg's lines for the library's. Below DEBUG the libraries
log their warnings and errors only; ``--loglevel debug`` shows everything.
``PREAGG_LOG_FORMAT=json`` writes one JSON object per line (``t``, ``level``,
``logger``, ``msg``, ``exc``) for a log collector (Kubernetes, Loki, Elasticsearch).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]

#: Libraries whose INFO is theirs, not the operator's (and our subclass of Faust's consumer, which
#: Faust's services log under its module: "[^--WorkerConsumer]: Starting...").
QUIET = ("faust", "aiokafka", "mode", "kafka", "aiohttp.access", "pymongo", "pipeline.worker.consumer")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The logger of the line each flush writes (``PREAGG_LOG_FLUSHES``); otherwise a worker logs
#: one progress line a minute (pipeline/worker/progress.py).
EACH_FLUSH = "preagg.flush.each"


class JsonLines(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "t": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``PREAGG_LOG_FORMAT``."""
    return JsonLines() if fmt == "json" else logging.Formatter(TEXT)


def quiet_libraries(level: int) -> None:
    """Libraries log WARNING and above unless ``level`` is DEBUG."""
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)


def configure(root: logging.Logger, level: int, fmt: LogFormat, each_flush: bool = False) -> None:
    """Every handler of ``root`` in ``fmt``; the libraries quiet; a line per flush only if asked."""
    for handler in root.handlers:
        handler.setFormatter(formatter(fmt))
    quiet_libraries(level)
    shown = each_flush or level <= logging.DEBUG
    logging.getLogger(EACH_FLUSH).setLevel(logging.NOTSET if shown else logging.WARNING)
