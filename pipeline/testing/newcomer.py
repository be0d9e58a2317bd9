"""``make dashboard`` as a newcomer runs it: started, its URL read from what it prints, stopped.

Shared by the README walk's test and ``make bench-first-answer``, which both wait for
the line ``== dashboard  http://...`` that :mod:`pipeline.demo.live` prints.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

#: A line a newcomer should never see after ``make demo`` or ``make dashboard``.
NOISY = re.compile(r"\bwarning\b|\berror\b|traceback", re.I)
#: The line the demo prints once the dashboard serves.
URL_LINE = re.compile(r"== dashboard\s+(http://127\.0\.0\.1:\d+/)")


def noisy(lines: Iterable[str]) -> list[str]:
    """The lines of ``lines`` that read as a warning, an error or a traceback."""
    return [line for line in lines if NOISY.search(line)]


@dataclass
class Dashboard:
    """The served URL (``None``: the command ended without printing it) and the lines read."""

    url: str | None = None
    lines: list[str] = field(default_factory=list)


@contextmanager
def make_dashboard(cwd: Path, env: Mapping[str, str]) -> Iterator[Dashboard]:
    """Run ``make -s dashboard`` in ``cwd`` until its URL is printed; stop it (SIGTERM, its group) on exit."""
    proc = subprocess.Popen(
        ["make", "-s", "dashboard"],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out = Dashboard()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.lines.append(line)
            found = URL_LINE.search(line)
            if found:
                out.url = found.group(1)
                break
        yield out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
