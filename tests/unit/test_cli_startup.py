"""``preagg --help`` and ``import pipeline`` load no client library: the CLI answers at once.

Asserted on the modules loaded, not on a time (timings belong in benchmarks:
docs/benchmarks.md, "CLI start-up"). Kinds import their aggregators, the name store
and the retention schedule inside ``Kind.stream``, which only a worker calls.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: What a worker or a query needs, and ``--help`` must not pay for.
HEAVY = (
    "aiokafka",
    "pymongo",
    "bson",
    "faust",
    "mode",
    "datasketch",
    "numpy",
    "scipy",
    "matplotlib",
    "aiohttp",
)

PROBE = """
import sys
{code}
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))))
"""


def loaded(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


@pytest.mark.parametrize(
    "argv", [["--help"], ["query", "--help"], ["produce", "hits", "--help"], ["sites", "--help"]]
)
def test_help_loads_no_client_library(argv: list[str]) -> None:
    code = "import contextlib, io\nfrom pipeline.cli import main\n"
    code += "with contextlib.redirect_stdout(io.StringIO()):\n"
    code += f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass"
    assert loaded(code) == set()


def test_import_pipeline_loads_no_client_library() -> None:
    assert loaded("import pipeline, pipeline.kinds, pipeline.settings") == set()


def test_queries_load_no_sketch_library() -> None:
    """datasketch imports scipy (0.3 s): a query loads it only when a sketch has registers."""
    code = "import pipeline.kinds.listens.query, pipeline.kinds.listens.api, pipeline.kinds.hits.query"
    assert not loaded(code) & {"datasketch", "scipy"}


def test_version_prints_the_installed_version() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("preagg "), done


def test_bash_completion_offers_the_parsers_commands_and_options() -> None:
    """Generated from the parser, so it lists what exists."""
    import shlex
    import shutil
    import subprocess
    import sys

    bash = shutil.which("bash") or "/bin/bash"  # the project's own scripts (.ci/run) need bash too
    script = subprocess.run(
        [sys.executable, "-m", "pipeline", "completion", "bash"], capture_output=True, text=True, timeout=60
    ).stdout

    def complete(*words: str) -> list[str]:
        typed = " ".join(shlex.quote(w) for w in words)
        call = f'COMP_WORDS=(preagg {typed}); COMP_CWORD={len(words)}; _preagg; echo "${{COMPREPLY[@]}}"'
        probe = f"{script}\n{call}"
        return subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=60).stdout.split()

    assert "rollups" in complete("ro") and "retention" in complete("re")
    assert complete("rollups", "") == ["--help", "rebuild"]
    assert "--site" in complete("rollups", "rebuild", "--s") and "--csv" in complete("query", "pages", "--")


def test_worker_help_names_real_settings_with_their_comments() -> None:
    """The list is made from the settings' own comments: never out of date."""
    from pipeline.cli import WORKER_SETTINGS, build_parser
    from pipeline.settings import Settings
    from pipeline.settings_doc import comments, first_sentence

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["worker"].format_help()  # type: ignore[attr-defined]
    docs = comments(Settings)
    assert len(WORKER_SETTINGS) >= 7
    for name in WORKER_SETTINGS:
        assert f"PREAGG_{name.upper()}=" in text
        assert first_sentence(docs[name]).replace("`", "").split()[0] in text


def test_serve_on_a_busy_port_is_one_line_and_exit_2() -> None:
    """`preagg serve` on a port in use printed a 25-line traceback."""
    import os
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "PREAGG_MONGO_URL": "mongodb://127.0.0.1:1/", "PREAGG_KAFKA_URL": "127.0.0.1:1"}
        out = subprocess.run(
            [sys.executable, "-m", "pipeline", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot listen on" in lines[0] and "--port" in lines[0], out.stderr
