"""Running and pricing queries: exact at zero noise against a hand computation, every refusal
before anything is reserved or sealed, a dry run that changes nothing, the draw before the
noise, RDP and user-level streams."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mechanisms.fakes import NoNoise
from userids_support import make_known

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import BlockBudgetError, InvalidRequestError, UnknownColumnError
from blockbudget.mechanisms import SeededNoise
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, price, run
from blockbudget.query.answers import quantiles_from_histogram
from blockbudget.store import Blocking, LatePolicy
from query.support import frame, platform, state


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    plat = platform(tmp_path / "h")
    yield plat
    plat.close()


def _clip(x: pd.Series, lo: float, hi: float) -> pd.Series:
    return x.dropna().clip(lo, hi)


def test_every_statistic_is_exact_at_zero_noise(p: Platform) -> None:
    df = frame()
    both = Last(2)

    def go(q: Query) -> object:
        return run(p, "s", q, blocks=both, context="a", noise=NoNoise()).value

    assert go(Query.count(epsilon=1)) == 48.0
    assert go(Query.count("v", epsilon=1)) == float(df.v.notna().sum())
    assert go(Query.sum("v", epsilon=1, lower=5, upper=30)) == pytest.approx(
        _clip(df.v, 5, 30).sum(), abs=1e-9
    )
    assert go(Query.mean("v", epsilon=1, lower=0, upper=40)) == pytest.approx(
        _clip(df.v, 0, 40).mean(), abs=1e-9
    )
    assert go(Query.variance("v", epsilon=1, lower=0, upper=40)) == pytest.approx(
        _clip(df.v, 0, 40).var(ddof=0), abs=1e-6
    )
    hist = go(Query.histogram("c", ["a", "b", "z"], epsilon=1, other=True))
    assert hist == {"a": 12.0, "b": 12.0, "z": 0.0, None: 24.0}
    # Quantiles: with one value per unit bin, the median is read off the exact CDF.
    qs = go(Query.quantiles("v", [0.0, 0.5, 1.0], epsilon=1, lower=0, upper=48, bins=48))
    counts = np.histogram(df.v.dropna(), bins=48, range=(0, 48))[0]
    assert qs == quantiles_from_histogram(
        counts.tolist(), lower=0, upper=48, probabilities=[0.0, 0.5, 1.0]
    )
    assert isinstance(qs, dict) and qs[0.0] == 0.0 and qs[1.0] == 48.0


def test_filters_and_group_by_are_exact_and_every_declared_group_is_released(p: Platform) -> None:
    df = frame()
    q = (
        Query.mean("v", epsilon=1, lower=0, upper=50)
        .where("v", ">", 10)
        .where("c", "in", ["a", "b", "c"])
        .group_by("c", ["a", "b", "zz"])
    )
    out = run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise())
    kept = df[(df.v > 10) & df.c.isin(["a", "b", "c"])]
    assert out.value == {
        "a": pytest.approx(kept[kept.c == "a"].v.mean()),
        "b": pytest.approx(kept[kept.c == "b"].v.mean()),
        "zz": 25.0,  # empty group: centre + 0/max(0, 1), i.e. the bounds' midpoint
    }
    assert [g.key for g in out.groups] == [("a",), ("b",), ("zz",)]
    # Two keys: row-major over the domains; a group-by costs what one group costs.
    q2 = Query.count(epsilon=1).group_by("c", ["a", "b"]).group_by("n", [0, 1])
    out2 = run(p, "s", q2, blocks=Last(2), context="a", noise=NoNoise())
    expected = {(c, n): float(((df.c == c) & (df.n == n)).sum()) for c in "ab" for n in (0, 1)}
    assert out2.value == expected and list(out2.value) == list(expected)
    assert out2.cost == Budget(epsilon=1)
    assert [part.size for part in out2.parts] == [4]


def test_the_cost_is_drawn_before_any_noise_and_the_result_says_what_was_spent(
    p: Platform,
) -> None:
    events: list[str] = []
    noise = NoNoise(events)
    before = len(p.ledger.events())
    q = Query.variance("v", epsilon=0.3, lower=0, upper=10)
    original = p.ledger.charge

    def charge(*args: object, **kwargs: object) -> object:
        events.append("charge")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    p.ledger.charge = charge  # type: ignore[method-assign,assignment]
    out = run(p, "s", q, blocks=Last(1), context="a", noise=noise)
    assert events == ["charge", "noise:laplace", "noise:laplace", "noise:laplace"]
    assert out.cost == Budget(epsilon=0.3) and out.secure_noise is False
    assert [c.scale for c in noise.calls] == [part.scale for part in out.parts]
    assert len(out.blocks) == 1 and out.interval is None
    kinds = [e.kind.value for e in p.ledger.events()[before:]]
    assert kinds == ["reserved", "charged", "released"]
    remaining = p.blocks("s")[-1].remaining["a"]
    assert remaining.startswith("(ε=999999.7")


def test_a_seeded_source_is_marked_insecure_and_the_default_is_secure(p: Platform) -> None:
    q = Query.count(epsilon=1)
    assert run(p, "s", q, blocks=Last(1), context="a", noise=SeededNoise(3)).secure_noise is False
    assert run(p, "s", q, blocks=Last(1), context="a").secure_noise is True


def test_intervals_cover_the_hand_computed_values(p: Platform) -> None:
    out = run(p, "s", Query.count(epsilon=1), blocks=Last(2), context="a", noise=NoNoise())
    lo, hi = out.interval or (0.0, 0.0)
    # Laplace(1): P(|X| > ln 20) = 5%.
    assert (lo, hi) == pytest.approx((48 - np.log(20), 48 + np.log(20)))
    mean = run(
        p,
        "s",
        Query.mean("v", epsilon=10, lower=0, upper=50),
        blocks=Last(2),
        context="a",
        noise=NoNoise(),
    )
    lo, hi = mean.interval or (0.0, 0.0)
    assert lo < float(mean.value) < hi  # type: ignore[arg-type]
    assert lo > 0.0 and hi < 50.0  # informative at ε = 10


@pytest.mark.parametrize(
    "query, error, match",
    [
        (Query.sum("nosuch", epsilon=1, lower=0, upper=1), UnknownColumnError, "nosuch"),
        (Query.count(epsilon=1).where("nosuch", "==", 1), UnknownColumnError, "nosuch"),
        (Query.count(epsilon=1).group_by("nosuch", ["a"]), UnknownColumnError, "nosuch"),
        (Query.mean("c", epsilon=1, lower=0, upper=1), InvalidRequestError, "numeric column"),
        (Query.count(epsilon=1).where("c", "==", 3), InvalidRequestError, "does not match"),
        (Query.count(epsilon=1).where("v", ">", "3"), InvalidRequestError, "does not match"),
        (Query.count(epsilon=1).group_by("n", ["0", "1"]), InvalidRequestError, "domain value"),
        (Query.histogram("n", ["0"], epsilon=1), InvalidRequestError, "category"),
        (Query.count(epsilon=1).where("time", ">", "2024-03-01"), InvalidRequestError, "match"),
        (Query.sum("v", epsilon=1e-30, lower=-1e288, upper=1e288), BlockBudgetError, "double"),
    ],
)
def test_refusals_come_before_anything_is_reserved_or_sealed(
    p: Platform, query: Query, error: type[Exception], match: str
) -> None:
    before = state(p)
    with pytest.raises(error, match=match):
        price(p, "s", query, blocks=Last(1), context="a")
    with pytest.raises(error, match=match):
        run(p, "s", query, blocks=Last(1), context="a")
    assert state(p) == before


def test_literals_of_the_column_type_are_accepted(p: Platform) -> None:
    q = (
        Query.count(epsilon=1)
        .where("time", ">=", pd.Timestamp("2024-03-01 12:00").to_pydatetime())
        .where("n", "<", 2.5)
    )
    out = run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise())
    df = frame()
    assert out.value == float(((df.time >= "2024-03-01 12:00") & (df.n < 2.5)).sum())


def test_a_dry_run_reserves_seals_and_charges_nothing(p: Platform) -> None:
    before = state(p)
    q = Query.mean("v", epsilon=0.5, lower=0, upper=10).group_by("c", ["a", "b"])
    quote = price(p, "s", q, blocks=Last(2), context="a")
    assert state(p) == before
    assert len(quote.blocks) == 2 and quote.ok and quote.affordable == (True, True)
    assert quote.cost == Budget(epsilon=0.5) and [x.name for x in quote.parts] == ["count", "sum"]
    assert [x.size for x in quote.parts] == [2, 2]
    out = run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise())
    assert out.blocks == quote.blocks and out.cost == quote.cost
    assert [x.scale for x in out.parts] == [x.scale for x in quote.parts]
    # An explicit selection shows which block cannot afford it.
    first = quote.blocks[0]
    p.ledger.charge([first], Budget(epsilon=999_999.3), context="a", request_id="x")
    quote = price(p, "s", q, blocks=list(quote.blocks), context="a")
    assert quote.affordable == (False, True) and not quote.ok
    snapshot = state(p)
    assert price(p, "s", q, blocks=Last(2), context="a").blocks == (quote.blocks[1],)
    assert state(p) == snapshot


def test_an_rdp_stream_is_charged_the_parts_laplace_curves(tmp_path: Path) -> None:
    p = platform(tmp_path / "h", accounting=Accounting.RDP)
    try:
        q = Query.mean("v", epsilon=1, lower=0, upper=10)
        quote = price(p, "s", q, blocks=Last(1), context="a")
        out = run(p, "s", q, blocks=Last(1), context="a", noise=NoNoise())
        curve = RdpCurve.zero()
        for part in out.parts:
            curve = curve + RdpCurve.laplace(scale=part.scale, sensitivity=part.sensitivity)
        assert isinstance(out.cost, RdpCurve) and out.cost == curve == quote.cost
        assert out.value == pytest.approx(_clip(frame().v[24:], 0, 10).mean())
    finally:
        p.close()


def test_a_user_level_stream_bounds_rows_and_pays_group_privacy(tmp_path: Path) -> None:
    p = Platform(tmp_path / "h", engine="arrow")
    try:
        blocking = Blocking.by_user("uid", ids_per_block=10, rows_per_user=2)
        p.create_stream(
            "u", policy=Budget(epsilon=100), blocking=blocking, late_policy=LatePolicy.DROP
        )
        p.add_context("a")
        # user 1 has 4 rows: only its first 2 (in stored order) count.
        rows = pd.DataFrame({"uid": [1, 1, 2, 1, 3, 1], "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
        p.ingest("u", rows)
        make_known(p, "u")  # a user stream is gated until its maximum id is released
        before = state(p, "u")
        q = Query.sum("v", epsilon=0.5, lower=0, upper=10)
        quote = price(p, "u", q, blocks=Last(1), context="a")
        assert quote.cost == Budget(epsilon=1) and state(p, "u") == before  # k·ε, k = 2
        out = run(p, "u", q, blocks=Last(1), context="a", noise=NoNoise())
        assert out.value == pytest.approx(1.0 + 2.0 + 3.0 + 5.0)
        assert out.cost == Budget(epsilon=1)
        assert p.blocks("u")[0].remaining["a"] == "(ε=99, δ=0)"
    finally:
        p.close()


def test_unknown_context_and_stream_are_refused_by_the_dry_run(p: Platform) -> None:
    before = state(p)
    with pytest.raises(BlockBudgetError, match="context"):
        price(p, "s", Query.count(epsilon=1), blocks=Last(1), context="nobody")
    with pytest.raises(BlockBudgetError):
        price(p, "nosuch", Query.count(epsilon=1), blocks=Last(1), context="a")
    assert state(p) == before


def test_the_engines_give_identical_answers(tmp_path: Path) -> None:
    """The engines return the same exact integers, so zero-noise answers are equal, not close."""
    queries = [
        Query.variance("v", epsilon=1, lower=-3.3, upper=41.7).group_by("c", ["a", "b", "c"]),
        Query.quantiles("v", [0.25, 0.5], epsilon=1, lower=0, upper=48, bins=7).where("n", "<", 3),
        Query.histogram("c", ["a", "d"], epsilon=1, other=True).where("v", "is null"),
    ]
    answers = {}
    for engine in ("arrow", "duckdb"):
        p = platform(tmp_path / engine, engine=engine)
        try:
            answers[engine] = [
                run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise()).groups for q in queries
            ]
        finally:
            p.close()
    assert answers["arrow"] == answers["duckdb"]
