"""Settings from the environment: a bad variable is named in a clear error."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

import pytest

from pipeline.kinds import load_kinds, named, stream_topics
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.relations import KIND as RELATIONS
from pipeline.settings import BUILTIN_KINDS, Settings, SettingsError, _parse


def test_bad_variables_name_themselves() -> None:
    for env, says in (
        ({"PREAGG_SCHEMA": "short"}, "PREAGG_SCHEMA='short': expected one of compact, readable"),
        (
            {"PREAGG_COMMIT_MODE": "maybe"},
            "PREAGG_COMMIT_MODE='maybe': expected one of exactly_once, at_least_once",
        ),
        ({"PREAGG_PARTITIONS": "four"}, "PREAGG_PARTITIONS='four': expected an integer"),
        ({"PREAGG_FLUSH_INTERVAL": "soon"}, "PREAGG_FLUSH_INTERVAL='soon': expected a number"),
    ):
        with pytest.raises(SettingsError, match=re.escape(says)):
            Settings.from_env(env)
    assert Settings.from_env({"PREAGG_SCHEMA": "readable"}).schema == "readable"


def test_every_setting_is_read_with_its_annotated_type() -> None:
    s = Settings.from_env(
        {
            "PREAGG_COMMIT_MAX_DOCS": "300",
            "PREAGG_COMMIT_TIMEOUT": "12.5",
            "PREAGG_MAX_FIELDS_PER_UPDATE": "0",
            "PREAGG_HOME": "/tmp/x",
            "PREAGG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "PREAGG_HITS_PROPS_MAX_NAMES": "7",
            "PREAGG_RELATIONS_FPR": "0.01",
            "PREAGG_LISTENS_HLL_PRECISION": "10",
            "PREAGG_IMPRESSIONS_TOPIC": "imp-x",
        }
    )
    assert (s.commit_max_docs, s.commit_timeout, s.max_fields_per_update) == (300, 12.5, 0)
    assert s.home == Path("/tmp/x") and s.kafka_security_protocol == "SASL_SSL"
    assert s.of(HITS).props_max_names == 7 and s.of(HITS).topic == "hits"
    assert s.of(RELATIONS).fpr == 0.01 and s.of(LISTENS).hll_precision == 10
    assert s.topic("impressions") == "imp-x"
    with pytest.raises(
        SettingsError, match=re.escape("PREAGG_HITS_PROPS_MAX_BYTES='big': expected an integer")
    ):
        Settings.from_env({"PREAGG_HITS_PROPS_MAX_BYTES": "big"}).of(HITS)
    with pytest.raises(
        SettingsError, match="PREAGG_KAFKA_SECURITY_PROTOCOL='TLS': expected one of PLAINTEXT"
    ):
        Settings.from_env({"PREAGG_KAFKA_SECURITY_PROTOCOL": "TLS"})


def test_no_setting_has_a_type_the_environment_cannot_give() -> None:
    """A new setting of an unsupported type fails here, not silently as a str at run time."""
    for cls in (Settings, *(k.settings_type for k in load_kinds(BUILTIN_KINDS))):
        hints = get_type_hints(cls)
        for f in fields(cls):
            if f.metadata.get("env") is not False:
                with contextlib.suppress(SettingsError):  # a bad value is fine; a TypeError is not
                    _parse(f.name, "1", hints[f.name])


def test_kinds_are_chosen_by_name_or_module_path_and_round_trip_to_a_child_process() -> None:
    s = Settings.from_env({"PREAGG_KINDS": "hits, listens", "PREAGG_LISTENS_HEARD_FPR": "0.02"})
    assert s.kinds == ("hits", "listens")
    assert stream_topics(s) == ["hits", "listens"]
    again = Settings.from_env(s.to_env())
    assert again.kinds == s.kinds and again.of(LISTENS) == s.of(LISTENS) and again.of(HITS) == s.of(HITS)
    assert again.of(LISTENS).heard_fpr == 0.02
    tagged = named(s, "t1")
    assert stream_topics(tagged) == ["hits-t1", "listens-t1"] and tagged.of(LISTENS).heard_fpr == 0.02
    child = Settings.from_env(tagged.to_env())
    assert stream_topics(child) == ["hits-t1", "listens-t1"] and child.of(LISTENS).heard_fpr == 0.02
    # Kinds are loaded (and refused) where they are used: settings know no kind.
    with pytest.raises(SettingsError, match="unknown stream kind 'clicks'"):
        stream_topics(Settings.from_env({"PREAGG_KINDS": "hits,clicks"}))
    with pytest.raises(SettingsError, match="named twice"):
        stream_topics(Settings.from_env({"PREAGG_KINDS": "hits,pipeline.kinds.hits:KIND"}))
    plugin = Settings.from_env({"PREAGG_KINDS": "pipeline.kinds.relations:KIND"})
    assert stream_topics(plugin) == ["relations"]


def test_a_settings_file_is_read_and_the_environment_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``preagg.toml`` (or ``PREAGG_CONFIG``); a variable always wins."""
    from pipeline.kinds.hits.settings import KEY as HITS_KEY
    from pipeline.settings import settings_file_env

    (tmp_path / "preagg.toml").write_text(
        'db = "from_file"\npartitions = 3\nkinds = ["hits", "listens"]\n\n'
        '[hits]\nquery_string = "allow:id"\nclf_props = true\n'
    )
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith("PREAGG_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PREAGG_PARTITIONS", "5")
    s = Settings.from_env()
    assert (s.db, s.partitions, s.kinds) == ("from_file", 5, ("hits", "listens"))
    assert s.of(HITS_KEY).query_string == "allow:id" and s.of(HITS_KEY).clf_props is True
    (tmp_path / "bad.toml").write_text("db = 2026-01-01\n")
    with pytest.raises(SettingsError, match=r"bad\.toml: db"):
        settings_file_env(str(tmp_path / "bad.toml"))
    with pytest.raises(SettingsError, match="no such file"):
        settings_file_env(str(tmp_path / "missing.toml"))


def test_the_documented_settings_file_is_read_as_shown() -> None:
    """docs/design.md's ``toml`` example: every key is a real setting of the right type."""
    from pipeline.kinds.hits.settings import KEY as HITS_KEY
    from pipeline.settings import settings_file_env

    doc = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    block = re.findall(r"```toml\n(.*?)```", doc, re.S)[0]
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(block)
    env = settings_file_env(f.name)
    Path(f.name).unlink()
    own = {f"PREAGG_{x.name.upper()}" for x in fields(Settings)}
    assert all(k in own or k.startswith("PREAGG_HITS_") for k in env)
    s = Settings.from_env(env)
    assert s.kinds == ("hits", "listens") and s.of(HITS_KEY).max_pages_per_day == 20000


def test_the_settings_table_is_made_from_the_settings_comments() -> None:
    """Settings stated once: the docs' table is the fields' comments."""
    from pipeline.settings_doc import builtin_kinds, rows, table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    assert table(builtin_kinds()) in doc, "docs/design.md's settings table is stale: run `make docs-settings`"
    undocumented = [var for var, _, said in rows(builtin_kinds()) if not said]
    assert not undocumented, f"settings without a comment: {undocumented}"


def test_a_misspelt_variable_is_named_with_the_setting_it_is_nearest_to() -> None:
    from pipeline.kinds import unknown_variables

    s = Settings.from_env(
        {
            "PREAGG_MAX_PENDNG_KEYS": "5",  # misspelt: the default stays, so it must be said
            "PREAGG_HITS_QUERYSTRING": "keep",
            "PREAGG_NOTHING_LIKE_IT": "1",
            "PREAGG_HITS_FORMAT": "clf",  # a kind's own setting
            "PREAGG_EMBEDDED_OPLOG": "1",  # read outside the settings
            "PREAGG_TEST_ARTIFACTS": "x",  # the test harness's
        }
    )
    assert s.max_pending_keys == Settings().max_pending_keys
    assert unknown_variables(s) == [
        ("PREAGG_HITS_QUERYSTRING", "PREAGG_HITS_QUERY_STRING"),
        ("PREAGG_MAX_PENDNG_KEYS", "PREAGG_MAX_PENDING_KEYS"),
        ("PREAGG_NOTHING_LIKE_IT", None),
    ]
