"""docker-compose.yml is validated against the Compose specification's JSON Schema (no Docker here)."""

import json
from importlib.metadata import distribution
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_matches_the_compose_spec() -> None:
    # read the vendored file without importing check_jsonschema (its CLI wants a newer click)
    path = distribution("check-jsonschema").locate_file(
        "check_jsonschema/builtin_schemas/vendor/compose-spec.json"
    )
    schema = json.loads(Path(str(path)).read_text())
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    jsonschema.validate(doc, schema)
    services = doc["services"]
    assert {"kafka", "mongo", "worker"} <= set(services)
    assert "container_name" not in services["worker"]  # would forbid --scale worker=N
    assert "ports" not in services["worker"]
    assert "--replSet" in services["mongo"]["command"]
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper
