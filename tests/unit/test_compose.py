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


def test_data_survives_down_and_up_and_workers_start_after_setup() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    kafka = services["kafka"]
    # the volume is mounted where the broker really writes (the image's default is elsewhere)
    mounts = {v.split(":")[1] for v in kafka["volumes"]}
    assert kafka["environment"]["KAFKA_LOG_DIRS"] in mounts
    assert kafka["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "isWritablePrimary" in " ".join(services["mongo"]["healthcheck"]["test"])
    assert services["setup"]["command"] == ["setup"]
    assert services["worker"]["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    assert services["worker"]["environment"]["PREAGG_AUTO_SETUP"] == "false"
