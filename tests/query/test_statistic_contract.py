"""The contract every registered DP statistic runs (:mod:`blockbudget.query.statistic`).

Each statistic's ``example`` query (over :func:`query.support.frame`) must: round-trip through
the JSON form; check its parameters on construction; plan aggregates that the Arrow and DuckDB
engines compute identically; be priced by every registered accounting rule as a cost of the
rule's kind that a fresh block accepts; answer exactly with zero noise, within its intervals;
answer the same at a huge ε with secure noise (up to that noise); list itself in the CLI. A new
statistic registered in :data:`~blockbudget.query.statistic.STATISTIC_MODULES` is picked up
here with no other edit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pytest
from mechanisms.fakes import NoNoise
from typer.testing import CliRunner

from blockbudget.accounting.rule import rules
from blockbudget.budget import Budget
from blockbudget.engine.arrow_engine import ArrowEngine
from blockbudget.engine.duckdb_engine import DuckDBEngine
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.source import price as price_parts
from blockbudget.platform import Last
from blockbudget.query import Query, Statistic, from_dict, run, to_dict
from blockbudget.query.catalog import STATISTICS as CATALOGUE
from blockbudget.query.parts import perturbations, plan
from blockbudget.query.statistic import DPStatistic, get_statistic, statistics

from .support import DAY, frame

if TYPE_CHECKING:
    from blockbudget.platform import Platform

STATISTICS = statistics()


def example(stat: DPStatistic, *, epsilon: float | str = 1.0, **more: Any) -> Query:
    return from_dict({"statistic": stat.name, "epsilon": epsilon, **stat.example, **more})


def tie_free_frame() -> pd.DataFrame:
    """The columns of :func:`query.support.frame` (``v`` in [0, 47] with nulls, ``n`` in
    [0, 4], ``c`` in a..d), with ``n = j`` on ``j + 1`` rows of each ``c``: every count within a
    group is distinct, so a ranking has one exact answer."""
    rows = []
    for c in "abcd":
        for j in range(5):
            for _ in range(j + 1):
                i = len(rows)
                v = math.nan if i % 7 == 3 else float((i * 7) % 48)
                rows.append({"time": DAY + pd.Timedelta(hours=i), "v": v, "n": j, "c": c})
    return pd.DataFrame(rows)


def tie_free_platform(home: Path) -> Platform:
    from blockbudget.platform import Platform
    from blockbudget.store import Blocking

    p = Platform(home, engine="arrow")
    policy = Budget(epsilon=1e9, delta=1e-6)
    p.create_stream("s", policy=policy, blocking=Blocking.by_time("time"))
    p.add_context("a")
    p.ingest("s", tie_free_frame())
    return p


def _close(a: Any, b: Any, *, tol: float) -> bool:
    if isinstance(a, Mapping):
        return list(a) == list(b) and all(_close(a[k], b[k], tol=tol) for k in a)
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def test_the_registry_holds_the_built_in_statistics_in_module_order() -> None:
    names = [s.name for s in STATISTICS]
    assert names[:6] == ["count", "sum", "mean", "variance", "quantiles", "histogram"]
    assert {"top_k", "covariance"} <= set(names)
    assert [s.value for s in Statistic] == names
    assert [name for name, _ in CATALOGUE] == names  # each catalogue line registers its name
    assert Statistic("mean") is Statistic.MEAN and Statistic.MEAN.definition is get_statistic(
        "mean"
    )
    with pytest.raises(InvalidRequestError, match="statistic must be one of"):
        Statistic("median")


def test_a_name_cannot_be_taken_by_another_statistic_class() -> None:
    from blockbudget.query.statistic import register_statistic

    class Impostor(type(get_statistic("count"))):  # type: ignore[misc]
        pass

    with pytest.raises(TypeError, match="already"):
        register_statistic(Impostor())


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
def test_the_json_form_round_trips(stat: DPStatistic) -> None:
    q = example(stat).where("c", "!=", "z").group_by("c", ["a", "b"])
    assert from_dict(to_dict(q)) == q
    assert to_dict(q)["statistic"] == stat.name and q.statistic.definition is stat
    exact = example(stat, epsilon="0.341279519435449196")
    assert from_dict(to_dict(exact)) == exact


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
def test_parameters_are_checked_on_construction(stat: DPStatistic) -> None:
    with pytest.raises(InvalidRequestError):
        example(stat, epsilon=0)
    with pytest.raises(InvalidRequestError, match="unknown query field"):
        example(stat, no_such_field=1)
    if stat.column_required:
        form = {k: v for k, v in stat.example.items() if k != "column"}
        with pytest.raises(InvalidRequestError):
            from_dict({"statistic": stat.name, "epsilon": 1, **form})
    if "bounds" not in stat.takes:
        with pytest.raises(InvalidRequestError, match="takes no clipping bounds"):
            example(stat, lower=0, upper=1)
    for param in stat.params:  # each own parameter is required, and typed
        form = {k: v for k, v in stat.example.items() if k != param.name}
        with pytest.raises(InvalidRequestError, match=param.name):
            from_dict({"statistic": stat.name, "epsilon": 1, **form})
        with pytest.raises(InvalidRequestError):
            example(stat, **{param.name: [1]})
    others = {p.name for s in STATISTICS for p in s.params} - {p.name for p in stat.params}
    for name in others:  # another statistic's parameter is refused
        with pytest.raises(InvalidRequestError, match="takes no"):
            example(stat, **{name: 1})


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
def test_both_engines_compute_the_same_plan(stat: DPStatistic, tmp_path: Path) -> None:
    from engine.engine_support import write_source

    table = pa.Table.from_pandas(frame(), preserve_index=False)
    source = write_source(str(tmp_path), [[table.slice(0, 20), table.slice(20)], [table]])
    q = example(stat).group_by("c", ["a", "b", "c"])
    work = plan(q, source)
    duck = DuckDBEngine()
    try:
        assert ArrowEngine().aggregate(work) == duck.aggregate(work)
    finally:
        duck.close()
    assert {a.name for a in work.aggregates} == {p.name for p in perturbations(q)}


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.name)
def test_every_accounting_rule_prices_it(stat: DPStatistic, rule: Any) -> None:
    q = example(stat)
    parts = perturbations(q, rule.name)
    assert parts and all(p.scale > 0 and p.size == q.groups * p.size // q.groups for p in parts)
    cost = price_parts(rule.name, epsilon=Decimal(1), parts=parts)
    assert isinstance(cost, rule.accepts) and not cost.is_zero
    if not rule.prices_noise:
        assert cost == Budget(epsilon=1)
    block = rule.filter(capacity=Budget(epsilon=10, delta=1e-5))
    assert block.accepts([], cost)
    assert not block.accepts([cost] * 100, cost)


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
def test_zero_noise_is_exact_within_the_intervals_and_a_huge_epsilon_close(
    stat: DPStatistic, tmp_path: Path
) -> None:
    p = tie_free_platform(tmp_path / "home")
    try:
        q = example(stat, epsilon=1e6).group_by("c", ["a", "b", "c", "d"])
        exact = run(p, "s", q, blocks=Last(3), context="a", noise=NoNoise())
        assert not exact.secure_noise
        for g in exact.groups:
            if g.interval is not None:
                assert g.interval[0] <= g.value <= g.interval[1]  # type: ignore[operator]
        noisy = run(p, "s", q, blocks=Last(3), context="a")
        assert noisy.secure_noise
        for e, n in zip(exact.groups, noisy.groups, strict=True):
            assert e.key == n.key and _close(e.value, n.value, tol=1e-3), (e, n)
            if n.interval is not None:
                assert n.interval[1] - n.interval[0] < 1e-3
    finally:
        p.close()


@pytest.mark.parametrize("stat", STATISTICS, ids=lambda s: s.name)
def test_the_cli_has_a_command_for_it(stat: DPStatistic) -> None:
    from blockbudget.cli import app as cli

    r = CliRunner().invoke(cli, ["query", stat.name, "--help"])
    assert r.exit_code == 0, r.output
    assert "--param" in r.output
