"""``make docs-schemas``: the JSON Schema files of ``schemas/`` from the fields' and views' declarations.

One file per stored document kind (``schemas/<kind>/documents/<collection>.schema.json``,
compact names, the default mode) and per view (``schemas/views/<view>.schema.json``);
a test checks the files match the declarations, another validates stored documents and
views' rows against them (pipeline/core/doc_schema.py says how they are built).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.core.doc_schema import schema_files
from pipeline.core.fields import STORE_SCHEMAS
from pipeline.kinds import load_kinds

#: Every kind preagg ships (not only the deployment's PREAGG_KINDS).
KINDS = ("hits", "listens", "impressions", "relations")


def expected() -> dict[Path, str]:
    """Each schema file's path and text."""
    kinds = load_kinds(KINDS)
    files = schema_files(
        [k.folder for k in kinds] + [STORE_SCHEMAS], [v for k in kinds for v in k.views("compact")]
    )
    return {path: json.dumps(schema, indent=2, ensure_ascii=False) + "\n" for path, schema in files.items()}


def write() -> list[Path]:
    """Write the files that differ; the paths written."""
    out = []
    for path, text in expected().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            out.append(path)
    return out


if __name__ == "__main__":  # make docs-schemas
    written = write()
    print(f"schemas: {len(written)} file(s) rewritten" + "".join(f"\n  {p}" for p in written))
