"""Hits from files: JSON lines, or combined/common log format (access logs), and their partition key."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from pipeline.core.decode import guarded
from pipeline.core.rejection import Rejection
from pipeline.files import Accepted, Refused, lines
from pipeline.kinds.hits.clf import ClfError, clf_event, parse_line
from pipeline.kinds.hits.decode import HitDecoder


def hit_key(site: str, page: str) -> bytes:
    """Partitioning key of a hit: one site/page always maps to one partition."""
    return site.encode() + b"\x00" + page.encode()


def read_hits(
    paths: Iterable[str], fmt: str, decoder: HitDecoder, site: str | None = None, props: bool = False
) -> Iterator[Accepted | Refused]:
    """Hits from files (``-`` is stdin) in ``jsonl`` or ``clf`` format.

    ``props``: clf hits carry status, method, referrer host and user-agent family
    as custom properties.
    """
    for name, no, line in lines(paths):
        if fmt == "clf":
            yield _from_clf(name, no, line, site or Path(name).stem, props)
        else:
            yield _from_jsonl(name, no, line, decoder, site)


def _from_jsonl(name: str, no: int, line: bytes, decoder: HitDecoder, site: str | None) -> Accepted | Refused:
    if site is not None:
        try:
            obj = orjson.loads(line)
            if isinstance(obj, dict) and "site" not in obj:
                obj["site"] = site
                line = orjson.dumps(obj)
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            pass  # the decoder below reports it
    hit = guarded(decoder.decode, line)
    if isinstance(hit, Rejection):
        return Refused(name, no, hit.reason, hit.detail)
    return Accepted(line, hit_key(hit[0], hit[1]))


def _from_clf(name: str, no: int, line: bytes, site: str, props: bool) -> Accepted | Refused:
    try:
        rec = parse_line(line.decode("utf-8", errors="replace"))
    except ClfError as exc:
        return Refused(name, no, "clf", str(exc))
    return Accepted(orjson.dumps(clf_event(rec, site, props)), hit_key(site, rec.path))
