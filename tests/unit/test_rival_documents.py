"""The fault proxy's rival inserts hold what a real rival writer's would: every field a keyed
upsert filters on. A rival holding less would make the upsert sent again after the duplicate
key miss the document and be refused again forever, a fault no real store plays."""

from __future__ import annotations

from pipeline.settings import Settings
from pipeline.testing.boundaries import mongos_keys
from pipeline.testing.mongofault import set_on_insert_keys


def test_every_shard_key_field_is_in_what_a_rival_inserts() -> None:
    held = set_on_insert_keys()
    for collection, keys in mongos_keys(Settings()).items():
        tops = {path.split(".")[0] for path in keys if path != "_id"}
        assert tops <= held.get(collection, frozenset()), (collection, keys)
