"""Print the production image's pins (``make constraints`` → deploy/constraints.txt).

The runtime dependencies of preagg, without its extras (the embedded stand-ins, plotting)
and without the test tools, each at the version installed in ``.venv`` (the one the tests
ran with), with every dependency of theirs.
"""

from __future__ import annotations

import importlib.metadata as md

from packaging.requirements import Requirement

HEADER = """# Versions the tests ran with: the production image installs preagg with these (pip install -c).
# Runtime dependencies only (no embedded stand-ins, no plotting, no test tools); regenerate with
# `make constraints` after changing pyproject.toml's dependencies, and run `make test`."""


def closure() -> dict[str, str]:
    """Name → installed version of every runtime dependency, transitively."""
    seen: dict[str, str] = {}

    def walk(name: str) -> None:
        key = name.lower().replace("_", "-")
        if key in seen:
            return
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            return
        seen[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                walk(req.name)

    for text in md.distribution("preagg").requires or []:
        req = Requirement(text)
        if req.marker is None:  # extras carry a marker (extra == "...")
            walk(req.name)
    return seen


def main() -> None:
    print(HEADER)
    for name, v in sorted(closure().items()):
        print(f"{name}=={v}")


if __name__ == "__main__":
    main()
