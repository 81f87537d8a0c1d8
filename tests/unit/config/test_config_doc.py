"""The table of configuration keys (quorum/config_keys.py) is the one source of each key: what is
derived from it, and the tables of docs/operating.md#configuration-keys written from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from quorum import config_doc
from quorum.config import KEYS, REQUIRED_KEYS, ConfigError, NodeConfig, config_from_settings
from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.config_keys import LITERAL_KEYS, SPECS
from quorum.config_values import key_name

CONTROLLER = {
    "node.id": 1,
    "process.roles": ["controller"],
    "controller.quorum.voters": ["1@127.0.0.1:9093"],
    "listeners": ["CONTROLLER://127.0.0.1:9093"],
    "metadata.log.dir": "/var/lib/mq/meta",
}


def test_every_field_is_a_key_but_where_the_config_came_from() -> None:
    names = {field.name for field in dataclasses.fields(NodeConfig)}
    assert set(KEYS.values()) == names - {"config_file", "ignored_keys", "given_keys"}
    assert all(KEYS[key_name(name)] == name for name in KEYS.values())
    assert list(SPECS) == list(KEYS)


def test_every_key_has_one_line_of_doc_and_a_shape() -> None:
    for name, spec in SPECS.items():
        assert spec.doc and "\n" not in spec.doc, name
        assert spec.kind.shape and "\n" not in spec.kind.shape, name


def test_what_is_derived_from_the_table() -> None:
    assert REQUIRED_KEYS == ("node.id", "process.roles", "listeners")
    # Text keys keep an override's text; list keys read TOML arrays.
    assert {"cluster.id", "metadata.log.dir", "super.users"} <= LITERAL_KEYS
    assert not {"log.dirs", "node.id", "listeners", "ssl.keystore.key"} & LITERAL_KEYS
    assert not set(KEYS) & set(NOT_APPLICABLE_KEYS)


@pytest.mark.parametrize("key", [k for k, spec in SPECS.items() if spec.kind.bounds])
def test_each_integers_bounds_hold_when_read_and_when_constructed(key: str) -> None:
    bounds = SPECS[key].kind.bounds
    assert bounds is not None
    minimum, maximum = bounds
    allowed = f"allowed: an integer from {minimum} to {maximum}"
    with pytest.raises(ConfigError, match=allowed) as info:
        config_from_settings({**CONTROLLER, key: minimum - 1})
    assert info.value.key == key
    config = config_from_settings(CONTROLLER)
    with pytest.raises(ConfigError, match=allowed):
        changes: dict[str, Any] = {KEYS[key]: maximum + 1}
        dataclasses.replace(config, **changes)


def test_the_document_has_the_tables_of_the_table() -> None:
    document = config_doc.DOCUMENT.read_text(encoding="utf-8")
    assert config_doc.with_tables(document) == document, (
        "docs/operating.md differs from quorum/config_keys.py: run "
        "`python -m quorum.config_doc --write`"
    )
    for key in [*KEYS, *NOT_APPLICABLE_KEYS]:
        assert f"`{key}`" in document, key


def test_the_check_catches_a_stale_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    current = config_doc.DOCUMENT.read_text(encoding="utf-8")
    stale = tmp_path / "operating.txt"
    stale.write_text(current.replace("| `node.id` | required |", "| `node.id` | 1 |"))
    monkeypatch.setattr(config_doc, "DOCUMENT", stale)
    assert config_doc.main(["--check"]) == 1
    assert "run python -m quorum.config_doc --write" in capsys.readouterr().out
    assert config_doc.main(["--write"]) == 0
    assert stale.read_text() == current
    assert config_doc.main(["--check"]) == 0
