"""A query the mechanism would refuse is refused before anything is sealed or reserved.

Checking the schema is not enough: the mechanism itself refuses ε = 0, clipping bounds whose
noise scale does not fit in a double, and a group-privacy cost its stream cannot account
(RDP with ``rows_per_user > 1``). :func:`blockbudget.query.check` computes the release's
noise scales, their price and the group cost from public parameters first, so each of these
is refused while the open block stays open (on a user-level stream a sealed block would drop
the next rows of its users) and the ledger has no new event.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.cli import app
from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.mechanisms.inputs import MAX_BOUND
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, check, run
from blockbudget.store import Blocking, LatePolicy, StreamSpec

runner = CliRunner()


def _platform(tmp_path: Path, *, accounting: Accounting = Accounting.BASIC) -> Platform:
    p = Platform(tmp_path / "h")
    policy = Budget(epsilon=1e7, delta=1e-6)
    p.create_stream("s", policy=policy, blocking=Blocking.by_time("time"), accounting=accounting)
    p.ledger.add_context("a")
    day = pd.Timestamp("2024-01-01")
    hours = [day + pd.Timedelta(hours=h) for h in range(6)]
    p.ingest("s", pd.DataFrame({"time": hours, "v": [float(h) for h in range(6)]}))
    return p


def _unchanged(p: Platform, stream: str, events: int) -> None:
    assert not any(m.sealed for m in p.store.blocks(stream))
    assert len(p.ledger.events()) == events


@pytest.mark.parametrize(
    "spec",
    [
        # bounds within MAX_BOUND whose Laplace scale B/ε overflows a double
        Query.sum("v", epsilon=1e-30, lower=-1e288, upper=1e288),
        Query.mean("v", epsilon=1e-90, lower=-1e250, upper=1e250),
    ],
    ids=["sum-huge-bounds", "mean-tiny-epsilon"],
)
def test_an_unrepresentable_noise_scale_is_refused_before_sealing(
    tmp_path: Path, spec: Query
) -> None:
    p = _platform(tmp_path)
    try:
        events = len(p.ledger.events())
        with pytest.raises(BlockBudgetError, match="does not fit in a double"):
            check(p, "s", spec)
        with pytest.raises(BlockBudgetError, match="does not fit in a double"):
            run(p, "s", spec, blocks=Last(1), context="a")
        _unchanged(p, "s", events)
    finally:
        p.close()


def test_a_zero_epsilon_query_is_refused_on_construction() -> None:
    with pytest.raises(InvalidRequestError, match="epsilon > 0"):
        Query.count(epsilon=0.0)


def test_rdp_with_several_rows_per_user_is_refused_at_creation_and_never_seals(
    tmp_path: Path,
) -> None:
    p = Platform(tmp_path / "h")
    try:
        blocking = Blocking.by_user("uid", ids_per_block=10, rows_per_user=2)
        policy = Budget(epsilon=4, delta=1e-6)
        with pytest.raises(InvalidRequestError, match="rows_per_user=1"):
            p.create_stream("u", policy=policy, blocking=blocking, accounting=Accounting.RDP)
        # A stream stored before this check existed: its queries are refused before sealing.
        p.store.create_stream(
            StreamSpec(
                name="u",
                policy=policy,
                blocking=blocking,
                accounting=Accounting.RDP,
                late_policy=LatePolicy.DROP,
            )
        )
        p.ledger.add_context("a")
        p.ingest("u", pd.DataFrame({"uid": [1, 2, 3], "v": [1.0, 2.0, 3.0]}))
        events = len(p.ledger.events())
        for spec in (
            Query.count(epsilon=0.1),
            Query.sum("v", epsilon=0.1, lower=0, upper=5),
        ):
            with pytest.raises(BlockBudgetError, match="group privacy for RDP"):
                run(p, "u", spec, blocks=Last(1), context="a")
        _unchanged(p, "u", events)
        # and the next rows of those users still land in their (open) block
        report = p.ingest("u", pd.DataFrame({"uid": [1, 2], "v": [4.0, 5.0]}))
        assert report.rows == 2
    finally:
        p.close()


def test_the_cli_refuses_huge_bounds_without_sealing(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    events = len(p.ledger.events())
    p.close()
    home = ["--home", str(tmp_path / "h")]
    query = ["query", "sum", "s", "--epsilon", "1e-30", "--column", "v", "--context", "a"]
    r = runner.invoke(app, [*query, "--lower", "-1e288", "--upper", "1e288", *home])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "does not fit in a double" in " ".join(r.output.split())
    p = Platform(tmp_path / "h")
    try:
        _unchanged(p, "s", events)
    finally:
        p.close()


def test_bounds_whose_clipped_sum_could_overflow_are_refused_before_sealing(
    tmp_path: Path,
) -> None:
    """A review's reproduction: bounds [0, 1.7e308] pass the noise-scale check, and rows
    1e308, 1e308 then overflowed ``fsum`` after the block was sealed — a failure that depends
    on the data. Bounds are now capped (``MAX_BOUND``) so that no clipped sum can overflow."""
    p = _platform(tmp_path)
    try:
        day = pd.Timestamp("2024-01-01")
        p.ingest("s", pd.DataFrame({"time": [day, day], "v": [1e308, 1e308]}))
        events = len(p.ledger.events())
        for build in (Query.sum, Query.mean):
            with pytest.raises(InvalidRequestError, match="overflow"):
                run(
                    p,
                    "s",
                    build("v", epsilon=1.0, lower=0, upper=1.7e308),
                    blocks=Last(1),
                    context="a",
                )
        _unchanged(p, "s", events)
        # the largest allowed bound still answers (the sum of the clipped rows is finite)
        ok = Query.sum("v", epsilon=1.0, lower=0, upper=MAX_BOUND)
        answer = run(p, "s", ok, blocks=Last(1), context="a")
        assert isinstance(answer.value, float) and math.isfinite(answer.value)
    finally:
        p.close()
