"""Settings from the environment: a bad variable is named in a clear error."""

from __future__ import annotations

import re

import pytest

from pipeline.settings import Settings, SettingsError


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
