"""The README's Python example runs as written (issue 25, item 5: it referred to undefined names)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_python_example_sends_a_hit_and_reads_it_back(settings: Settings, tmp_path: Path) -> None:
    blocks = python_blocks()
    assert blocks, "README.md has no Python example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    worker = WorkerProcess(settings, "readme").start()
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            env={**os.environ, **settings.to_env()},
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        worker.terminate()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "example.com/index.html, last 5 minutes: 1 hits" in done.stdout, (done.stdout, done.stderr[-2000:])
