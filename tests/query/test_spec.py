"""The declarative query: construction refuses malformed queries, the JSON form round-trips and
refuses anything else, and the command line's short forms read as documented."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pytest

from blockbudget.engine import Op, Predicate
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.query import Query, Statistic, from_dict, to_dict
from blockbudget.query.parts import perturbations, sensitivities
from blockbudget.query.text import parse_filter, parse_group_by, parse_list, parse_literal

QUERIES = [
    Query.count(epsilon=0.1),
    Query.count("dep_delay", epsilon=1e-3),
    Query.sum("v", epsilon=2, lower=-1.5, upper=7),
    Query.mean("v", epsilon=0.5, lower=-60, upper=300).where("dest", "==", "BOS"),
    Query.variance("v", epsilon=1, lower=0, upper=1).group_by("origin", ["EWR", "JFK"]),
    Query.quantiles("v", [0.1, 0.5, 0.99], epsilon=1, lower=0, upper=10, bins=20),
    Query.histogram("carrier", ["AA", "UA"], epsilon=0.3, other=True)
    .where("time", ">=", datetime(2024, 3, 1, 8))
    .where("day", "<", date(2024, 3, 2))
    .where("carrier", "in", ["AA", "UA", "DL"])
    .where("tail", "is null")
    .group_by("origin", ["EWR", "JFK", "LGA"])
    .group_by("weekend", [True, False]),
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.statistic.value)
def test_the_json_form_round_trips(query: Query) -> None:
    form = to_dict(query)
    assert from_dict(form) == query
    import json

    assert from_dict(json.loads(json.dumps(form))) == query  # through real JSON text


def test_the_builder_is_fluent_and_frozen() -> None:
    q = Query.count(epsilon=0.1).where("dest", "==", "BOS").group_by("origin", ["EWR", "JFK"])
    assert q.filters == (Predicate("dest", Op.EQ, "BOS"),)
    assert q.groups == 2 and q.columns() == ("dest", "origin")
    with pytest.raises(AttributeError):
        q.epsilon = 1.0  # type: ignore[misc]
    assert Query.count(epsilon=0.1).filters == ()  # the builder returned a new query


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Query.count(epsilon=0), "epsilon > 0"),
        (lambda: Query(statistic=Statistic.SUM, epsilon=1, column="v"), "lower < upper"),
        (lambda: Query.sum("v", epsilon=1, lower=3, upper=1), "lower < upper"),
        (lambda: Query.mean("v", epsilon=1, lower=0, upper=float("inf")), "finite"),
        (lambda: Query.variance("v", epsilon=1, lower=0, upper=2.0**500), "overflow"),
        (lambda: Query.histogram("c", [], epsilon=1), "categories"),
        (lambda: Query.histogram("c", ["a", "a"], epsilon=1), "distinct"),
        (lambda: Query.quantiles("v", [1.5], epsilon=1, lower=0, upper=1), r"\[0, 1\]"),
        (lambda: Query.quantiles("v", [0.5], epsilon=1, lower=0, upper=1, bins=0), "count"),
        (lambda: Query.count(epsilon=1).where("v", "~", 1), "unknown filter operator"),
        (lambda: Query.count(epsilon=1).where("v", "==", float("nan")), "NaN"),
        (lambda: Query.count(epsilon=1).where("v", "in", "abc"), "list of values"),
        (lambda: Query.count(epsilon=1).group_by("k", None), "declared domain"),  # type: ignore[arg-type]
        (lambda: Query.count(epsilon=1).group_by("k", []), "non-empty domain"),
        (lambda: Query.count(epsilon=1).group_by("k", [1]).group_by("k", [2]), "twice"),
        (
            lambda: Query.count(epsilon=1).group_by("k", range(2000)).group_by("j", range(2000)),
            "at most",
        ),
    ],
)
def test_malformed_queries_are_refused_on_construction(build: Any, match: str) -> None:
    with pytest.raises((InvalidRequestError, InvalidBudgetError), match=match):
        build()


@pytest.mark.parametrize(
    "form, match",
    [
        ({"statistic": "count", "epsilon": 1, "colum": "v"}, "unknown query field"),
        ({"statistic": "median", "epsilon": 1}, "statistic must be one of"),
        ({"statistic": "count"}, "needs 'epsilon'"),
        ({"statistic": "count", "epsilon": "one"}, "must be a decimal number of ASCII digits"),
        ({"statistic": "count", "epsilon": True}, "must be a number"),
        ({"statistic": "count", "epsilon": 1, "version": 3}, "version"),
        ({"statistic": "count", "epsilon": 1, "group_by": [{"column": "k"}]}, "declared domain"),
        (
            {"statistic": "count", "epsilon": 1, "group_by": [{"column": "k", "domain": "ab"}]},
            "domain is a list",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 1,
                "where": [{"column": "k", "op": "in", "value": 1}],
            },
            "list of values",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 1,
                "where": [{"column": "k", "op": "==", "value": [1]}],
            },
            "one value",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 1,
                "where": [{"column": "k", "op": "==", "value": {}}],
            },
            "literal object",
        ),
        (
            {"statistic": "count", "epsilon": 1, "where": [{"column": 3, "op": "==", "value": 1}]},
            "name of 1 to 200",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 1,
                "where": [{"column": "t", "op": "<", "value": {"date": "yesterday"}}],
            },
            "ISO 8601",
        ),
        ({"statistic": "count", "epsilon": 1, "where": "v > 1"}, "must be a list"),
        (
            {
                "statistic": "histogram",
                "epsilon": 1,
                "column": "c",
                "categories": ["a"],
                "other": "yes",
            },
            "boolean",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_the_json_form_refuses_anything_else(form: Any, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        from_dict(form)


def test_sensitivities_come_from_the_fixed_point_encoding() -> None:
    # [0, 8] centred at 0: radius 8, q = 8 / 2**20, max_units = 2**20 → Δ = 8 (+ slack).
    (part,) = perturbations(Query.sum("v", epsilon=2, lower=0, upper=8))
    assert 8.0 < part.sensitivity <= 8.0 * (1 + 1.1e-6) and part.scale >= part.sensitivity / 2
    # Variance on [0, 8] centred at 4: Δ_sum = 4, Δ_sum_squares = 16, each at ε/3.
    s = sensitivities(Query.variance("v", epsilon=3, lower=0, upper=8))
    assert s["count"] == 1.0 and 4.0 < s["sum"] < 4.0001 and 16.0 < s["sum_squares"] < 16.001
    parts = perturbations(Query.variance("v", epsilon=3, lower=0, upper=8))
    assert [float(p.epsilon or 0) for p in parts] == pytest.approx([1.0, 1.0, 1.0])
    # Group-by does not change the scale (parallel composition); it widens the vector.
    grouped = perturbations(Query.mean("v", epsilon=1, lower=0, upper=8).group_by("k", [1, 2, 3]))
    single = perturbations(Query.mean("v", epsilon=1, lower=0, upper=8))
    assert [p.scale for p in grouped] == [p.scale for p in single]
    assert [p.size for p in grouped] == [3, 3]
    (bins,) = perturbations(Query.quantiles("v", [0.5], epsilon=1, lower=0, upper=8, bins=16))
    assert bins.sensitivity == 1.0 and bins.size == 16 and bins.scale == 1.0


def test_the_command_line_short_forms() -> None:
    assert parse_filter("dest == BOS") == {"column": "dest", "op": "==", "value": "BOS"}
    assert parse_filter("d>=2.5") == {"column": "d", "op": ">=", "value": 2.5}
    assert parse_filter("c not in AA, UA") == {"column": "c", "op": "not in", "value": ["AA", "UA"]}
    assert parse_filter("tail is not null") == {"column": "tail", "op": "is not null"}
    assert parse_filter('code == "17"')["value"] == "17"
    assert parse_literal("2024-03-01") == {"date": "2024-03-01"}
    assert parse_literal("2024-03-01T08:00") == {"datetime": "2024-03-01T08:00"}
    assert parse_literal("true") is True and parse_literal("x y") == "x y"
    assert parse_group_by("origin=EWR,JFK") == {"column": "origin", "domain": ["EWR", "JFK"]}
    assert parse_list("[1, 2]") == [1, 2]
    for bad in ("dest BOS", "v is null 3", "v =="):
        with pytest.raises(InvalidRequestError):
            parse_filter(bad)
    with pytest.raises(InvalidRequestError, match="declared public domain"):
        parse_group_by("origin")


def test_quantiles_from_a_noisy_histogram_are_monotone_and_within_bounds() -> None:
    import itertools

    import numpy as np

    from blockbudget.query.answers import quantiles_from_histogram

    rng = np.random.default_rng(7)
    probs = [i / 20 for i in range(21)]
    for _ in range(200):
        counts = rng.integers(0, 5, size=12) + rng.laplace(0.0, 2.0, size=12)  # some negative
        out = quantiles_from_histogram(counts.tolist(), lower=-3, upper=9, probabilities=probs)
        values = [out[p] for p in probs]
        assert all(a <= b for a, b in itertools.pairwise(values))
        assert all(-3 <= v <= 9 for v in values)
    # all mass in one bin: every quantile inside that bin; no mass: the midpoint
    one = quantiles_from_histogram([0, 0, 5, 0], lower=0, upper=4, probabilities=[0.1, 0.9])
    assert 2.0 <= one[0.1] <= one[0.9] <= 3.0
    assert quantiles_from_histogram([-1, -2], lower=0, upper=4, probabilities=[0.5]) == {0.5: 2.0}
