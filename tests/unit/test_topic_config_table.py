"""The topic config table is declared once, in the core: the control plane's rules, the CLI's
help and the docs' lists follow it, and each number's default is a real broker setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kafscale._core import topic_configs
from kafscale.admin.topic_configs import CONFIG_RULES, Rejected, normalise
from kafscale.cli import build_parser
from kafscale.config import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_control_plane_checks_the_cores_table() -> None:
    table = topic_configs()
    assert list(CONFIG_RULES) == [c.name for c in table]
    for config in table:
        rule = CONFIG_RULES[config.name]
        assert (rule.expected, rule.doc) == (config.expected, config.doc)
        if config.kind == "string":
            assert normalise(config.name, config.expected) == config.expected
            continue
        if config.kind == "list":
            for value in ("delete", "compact", "compact,delete"):
                assert normalise(config.name, value) == value
            with pytest.raises(Rejected, match=re.escape(config.expected)):
                normalise(config.name, "forever")
            continue
        if config.kind == "double":
            assert normalise(config.name, str(config.low)) == f"{config.low}.0"
            assert normalise(config.name, str(config.high)) == f"{config.high}.0"
            for outside in ("-0.1", "1.01", "half"):
                with pytest.raises(Rejected, match=re.escape(config.expected)):
                    normalise(config.name, outside)
            continue
        assert normalise(config.name, str(config.low)) == str(config.low)
        assert normalise(config.name, str(config.high)) == str(config.high)
        for outside in (config.low - 1, config.high + 1):
            with pytest.raises(Rejected, match=re.escape(config.expected)):
                normalise(config.name, str(outside))


def test_every_default_is_a_broker_setting() -> None:
    settings = {f.name for f in dataclasses.fields(Settings)}
    numbers = [c for c in topic_configs() if c.kind not in ("list", "string")]
    assert numbers
    for config in numbers:
        assert config.broker_setting in settings, config.name


@pytest.mark.parametrize("page", ["cli.md", "compatibility.md"])
def test_the_docs_name_every_topic_config(page: str) -> None:
    text = (DOCS / page).read_text()
    missing = [c.name for c in topic_configs() if f"`{c.name}" not in text]
    assert not missing, f"docs/{page} does not name {missing}"


def test_the_cli_help_names_every_topic_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["topics", "create", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    missing = [c.name for c in topic_configs() if c.name not in out]
    assert not missing
