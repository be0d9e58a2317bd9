"""``make bench-first-answer``: a newcomer's time to a first answer, from a fresh clone.

1. ``git clone`` of this checkout into a temporary directory;
2. ``make demo`` there, timed to its exit: creating ``.venv`` and installing the
   project (with whatever pip cache the machine has), then the demo's exact summary;
3. ``make dashboard`` there, timed to the URL it prints and to the first chart drawn in
   Debian's Chromium (``make browser``), driven by Playwright as the browser test does.

    python -m benchmarks.first_answer --out bench-results/first-answer.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import write_results
from pipeline.testing.newcomer import make_dashboard, noisy

REPO = Path(__file__).resolve().parents[1]


def first_chart_seconds(url: str, started: float, timeout: float = 60) -> float:
    """Seconds from ``started`` to the dashboard's first chart in headless Chromium."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Chromium is missing: `make browser`")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless=new", "--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        deadline = time.monotonic() + timeout
        while page.evaluate("window.preaggFirstChart") is None:
            if time.monotonic() > deadline:
                raise SystemExit("no chart drawn")
            time.sleep(0.05)
        took = time.monotonic() - started
        browser.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results/first-answer.json")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")}
    with tempfile.TemporaryDirectory(prefix="preagg-first-answer-") as tmp:
        clone = Path(tmp) / "preagg"
        began = time.monotonic()
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        cloned = time.monotonic() - began
        demo = subprocess.run(["make", "-s", "demo"], cwd=clone, env=env, capture_output=True, text=True)
        demo_s = time.monotonic() - began - cloned
        out = demo.stdout + demo.stderr
        if demo.returncode != 0:
            raise SystemExit(f"make demo failed:\n{out[-3000:]}")
        started = time.monotonic()
        with make_dashboard(clone, env) as dash:
            if dash.url is None:
                raise SystemExit("".join(dash.lines[-40:]))
            url_s = time.monotonic() - started
            chart_s = first_chart_seconds(dash.url, started)
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "clone_s": round(cloned, 1),
        "make_demo_s": round(demo_s, 1),
        "demo_exact": "(expected 60000: exact)" in out,
        "demo_warning_lines": noisy(out.splitlines()),
        "make_dashboard_url_s": round(url_s, 1),
        "make_dashboard_first_chart_s": round(chart_s, 1),
        "clone_to_first_chart_s": round(cloned + demo_s + chart_s, 1),
    }
    print(results)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
