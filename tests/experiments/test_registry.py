"""The experiment registry and the `blockbudget experiment` command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.errors import InvalidRequestError
from blockbudget.experiments import all_experiments, get_experiment


def test_unknown_experiment_is_refused_with_the_known_names() -> None:
    with pytest.raises(InvalidRequestError, match="unknown experiment 'no-such'"):
        get_experiment("no-such")


def test_cli_unknown_experiment_exits_2() -> None:
    result = CliRunner().invoke(app, ["experiment", "run", "no-such", "--quick"])
    assert result.exit_code == 2
    assert "unknown experiment" in result.output


def test_every_experiment_has_a_unique_dashed_name_and_a_source() -> None:
    for name, experiment in all_experiments().items():
        assert name == experiment.name
        assert name == name.lower() and " " not in name
        assert experiment.source and experiment.summary


def test_cli_lists_experiments() -> None:
    result = CliRunner().invoke(app, ["experiment", "list"])
    assert result.exit_code == 0, result.output
    for name in all_experiments():
        assert name in result.output
