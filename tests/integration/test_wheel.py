"""The wheel installs and works without the source tree: schemas inside the package, every import declared.

Builds the wheel from this checkout (no build isolation: hatchling comes with the dev
dependencies, so no network), installs it without ``-e`` into a fresh virtual
environment whose other dependencies come from the project's environment, and runs
the installed ``preagg`` from a directory outside the checkout: ``preagg schema``,
one event of each kind decoded, and produce → worker → query on the embedded services.
"""

from __future__ import annotations

import asyncio
import json
import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import orjson
import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

DECODE_ONE_OF_EACH = """
import pipeline
from pipeline.kinds import REGISTRY, kind_named
from pipeline.settings import Settings
from pipeline.core.rejection import Rejection
events = {
    "hits": b'{"site": "s", "page": "/", "ts": 1700000000}',
    "impressions": b'{"user": 1, "item": 2, "ts": 1700000000}',
    "relations": b'{"user": 1, "item": 2}',
    "listens": b'{"user": 1, "tag": 2, "song": 3, "ts": 1700000000}',
}
s = Settings()
for name in REGISTRY:
    kind = kind_named(name)
    got = kind.decoder(s, s.of(kind)).decode(events[name])
    assert not isinstance(got, Rejection), (name, got)
print(pipeline.__file__)
"""


DASHBOARD_FILES = (
    "from pipeline.serve.server import DASHBOARD; print(*sorted(p.name for p in DASHBOARD.iterdir()))"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bin/`` of a fresh virtual environment holding the wheel."""
    root = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w"]
    subprocess.run([*build, str(root / "dist"), str(REPO)], check=True, timeout=300)
    (wheel,) = (root / "dist").glob("preagg-*.whl")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    purelib = subprocess.run(
        [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Dependencies from the project's environment (a path, not a site dir: its editable
    # install of this checkout is not processed, so `pipeline` can only be the wheel's).
    Path(purelib, "project-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    subprocess.run([*pip, str(wheel)], check=True, timeout=300)
    return bin_dir


def run(bin_dir: Path, cwd: Path, *args: str | Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_installed_wheel_has_its_schemas_and_decodes_every_kind(installed: Path, tmp_path: Path) -> None:
    where = run(installed, tmp_path, installed / "python", "-c", DECODE_ONE_OF_EACH)
    assert where.startswith(str(installed.parent)), where  # the wheel's copy, not this checkout
    schema = json.loads(run(installed, tmp_path, installed / "preagg", "schema", "--json"))
    assert {"hits_daily", "imp_pairs", "rel_users", "listens", "preagg_names"} <= {
        r["collection"] for r in schema["fields"]
    }
    # preagg serve's dashboard ships inside the package.
    files = run(installed, tmp_path, installed / "python", "-c", DASHBOARD_FILES)
    assert files.split() == ["dashboard.css", "dashboard.js", "index.html"], files


def test_installed_wheel_produces_aggregates_and_queries(
    installed: Path, settings: Settings, tmp_path: Path
) -> None:
    env = settings.to_env()
    hits = tmp_path / "hits.jsonl"
    hits.write_bytes(
        b"\n".join(
            orjson.dumps({"site": "w.example", "page": "/", "ts": 1_700_000_000 + i}) for i in range(50)
        )
    )
    out = run(installed, tmp_path, installed / "preagg", "produce", "hits", hits, env=env)
    assert "sent 50 events" in out
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        [installed / "preagg", "worker"],
        cwd=tmp_path,
        env={**os.environ, **env, "PREAGG_WORKER_ID": "wheel-worker"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120))
    finally:
        worker.terminate()
        rc = worker.wait(60)
        log.close()
    assert rc == 0, (tmp_path / "worker.log").read_text()[-3000:]
    query = ["query", "hits", "--site", "w.example", "--by", "day", "--json"]
    rows = json.loads(
        run(
            installed,
            tmp_path,
            installed / "preagg",
            *query,
            "--from",
            "2023-11-14",
            "--to",
            "2023-11-14",
            env=env,
        )
    )
    assert sum(r["hits"] for r in rows) == 50


def test_the_wheel_holds_only_the_product(installed: Path) -> None:
    """Benchmarks and tests stay in the checkout (``benchmarks/``, ``tests/``): never installed."""
    (wheel,) = (installed.parent.parent / "dist").glob("preagg-*.whl")
    with zipfile.ZipFile(wheel) as z:
        tops = {name.split("/", 1)[0] for name in z.namelist()}
        names = z.namelist()
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pipeline"}, tops
    assert not [n for n in names if n.startswith(("pipeline/bench", "benchmarks", "tests"))]
