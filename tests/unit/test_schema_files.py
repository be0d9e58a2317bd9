"""The JSON Schemas in schemas/ are the declarations' (``make docs-schemas`` rewrites them), and
every document kind and view has one."""

from __future__ import annotations

from pipeline.core.doc_schema import document_schema
from pipeline.core.fields import SCHEMAS, documents
from pipeline.schema_files import expected


def test_the_schema_files_are_current() -> None:
    stale = [
        str(p) for p, text in expected().items() if not p.exists() or p.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"run `make docs-schemas`: {stale}"


def test_every_schema_file_is_declared() -> None:
    on_disk = set(SCHEMAS.glob("*/documents/*.schema.json")) | set((SCHEMAS / "views").glob("*.schema.json"))
    assert on_disk == set(expected()), "a schema file no declaration makes: remove it"


def test_every_field_has_a_type_and_its_nesting_resolves_in_both_modes() -> None:
    for folder in SCHEMAS.iterdir():
        if not (folder / "fields.json").exists():
            continue
        for doc, spec in documents(folder).items():
            for name, field in spec["fields"].items():
                assert "bsonType" in field["bson"], (folder.name, doc, name)
            for mode in ("compact", "readable"):
                schema = document_schema(folder, doc, mode)
                assert schema["additionalProperties"] is False and "_id" in schema["properties"]
