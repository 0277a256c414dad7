"""The query's JSON form: the one schema that the Python API, the CLI and the HTTP API share.

:func:`to_dict` writes a :class:`~blockbudget.query.spec.Query` as plain JSON values and
:func:`from_dict` reads it back, refusing anything else (unknown or misspelt fields, wrong
types) with an :class:`~blockbudget.errors.InvalidRequestError` — the CLI's ``--json`` and the
HTTP body go through here, then through :class:`Query`'s own validation, so there is one
validator. ``from_dict(to_dict(q)) == q`` for every query.

Form (version 1)::

    {"version": 1, "statistic": "mean", "epsilon": 0.5, "column": "dep_delay",
     "lower": -60, "upper": 300,
     "where": [{"column": "dest", "op": "==", "value": "BOS"}],
     "group_by": [{"column": "origin", "domain": ["EWR", "JFK", "LGA"]}]}

plus ``categories`` and ``other`` (histogram), ``quantiles`` and ``bins`` (quantiles), and the
registered statistics' own parameters as flat fields (:attr:`~blockbudget.query.statistic.
DPStatistic.params`, e.g. ``"k"`` of a top-k).

Version 2 adds the noise: ``"mechanism": "laplace" | "gaussian"`` (default ``"laplace"``) and
``"delta"`` (a Gaussian query's δ, 0 < δ < 1)::

    {"version": 2, "statistic": "count", "epsilon": 0.5, "mechanism": "gaussian",
     "delta": 1e-6}

``epsilon`` and ``delta`` are JSON numbers or exact decimal strings (``"epsilon":
"0.341279519435449196"``): a string is read exactly, so the exact ε that ``afford`` reports as
``epsilon_exact`` can be requested without a float rounding it above the budget.

A version-1 form (or one without ``version`` and without these fields) keeps its meaning — a
Laplace query; ``mechanism`` and ``delta`` in a version-1 form are refused. :func:`to_dict`
writes the lowest version that expresses the query (1 for Laplace, 2 for Gaussian), so a
Laplace query's form is unchanged for older readers. Literals
are JSON strings, numbers and booleans; a date is ``{"date": "2024-01-31"}``, a timestamp
``{"datetime": "2024-01-31T08:00:00"}`` (ISO 8601) and a decimal ``{"decimal": "0.10"}``, so
that a literal's type survives the round trip and is checked against the column's type.

Example:
    >>> from blockbudget.query import Query
    >>> q = Query.count(epsilon=0.1).where("dest", "==", "BOS")
    >>> to_dict(q)["where"]
    [{'column': 'dest', 'op': '==', 'value': 'BOS'}]
    >>> from_dict(to_dict(q)) == q
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from blockbudget.decimals import plain_number
from blockbudget.engine.plan import GroupKey, Op, Predicate, Scalar, check_scalar
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.query.spec import (
    ParamValue,
    Query,
    Statistic,
    make_group_key,
    make_predicate,
    parse_mechanism,
    parse_op,
)
from blockbudget.query.statistic import all_params

#: The newest version of the form; every version from 1 up is read.
VERSION = 2

#: The fields that version 2 added (the noise).
_V2_FIELDS = {"mechanism", "delta"}

_FIELDS = {
    "version",
    "statistic",
    "epsilon",
    "column",
    "lower",
    "upper",
    "categories",
    "other",
    "quantiles",
    "bins",
    "where",
    "group_by",
    *_V2_FIELDS,
}


def literal_to_json(value: Scalar) -> Any:
    """A literal as JSON: itself, or a tagged ISO string for dates and timestamps."""
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    return value


def literal_from_json(value: Any) -> Scalar:
    """The literal a JSON value stands for (see the module docstring).

    Raises:
        InvalidRequestError: anything but a string, number, boolean or tagged date/timestamp.
    """
    if isinstance(value, Mapping):
        if len(value) == 1 and isinstance(next(iter(value.values())), str):
            ((tag, text),) = value.items()
            try:
                if tag == "date":
                    return date.fromisoformat(text)
                if tag == "datetime":
                    return datetime.fromisoformat(text)
                if tag == "decimal":
                    return check_scalar(Decimal(text))
            except (ValueError, InvalidOperation):
                raise InvalidRequestError(f"{tag} literal must be ISO 8601, got {text!r}") from None
        raise InvalidRequestError(
            "a literal object is {'date': ISO}, {'datetime': ISO} or {'decimal': digits}, got "
            f"{dict(value)!r}"
        )
    if isinstance(value, str | bool | int | float):
        return value
    raise InvalidRequestError(f"a literal is a string, number or boolean, got {value!r}")


def _predicate_json(p: Predicate) -> dict[str, Any]:
    out: dict[str, Any] = {"column": p.column, "op": p.op.value}
    if isinstance(p.value, tuple):
        out["value"] = [literal_to_json(v) for v in p.value]
    elif p.value is not None:
        out["value"] = literal_to_json(p.value)
    return out


def _key_json(k: GroupKey) -> dict[str, Any]:
    return {"column": k.column, "domain": [literal_to_json(v) for v in k.domain]}


def _budget_json(value: float | Decimal) -> float | str:
    """ε or δ as given: a float stays a number, an exact decimal stays an exact string."""
    if isinstance(value, Decimal):
        from blockbudget.budget import canonical_decimal

        return canonical_decimal(value)
    return value


def to_dict(query: Query) -> dict[str, Any]:
    """The JSON form of ``query`` (fields at their defaults are left out; the lowest version
    that expresses it: 1 for a Laplace query, 2 for a Gaussian one)."""
    gaussian = query.mechanism is NoiseKind.GAUSSIAN
    out: dict[str, Any] = {
        "version": 2 if gaussian else 1,
        "statistic": query.statistic.value,
        "epsilon": _budget_json(query.epsilon),
    }
    if gaussian:
        out.update(mechanism=query.mechanism.value, delta=_budget_json(query.delta))
    optional: dict[str, Any] = {
        "column": query.column,
        "lower": query.lower,
        "upper": query.upper,
        "categories": None
        if query.categories is None
        else [literal_to_json(c) for c in query.categories],
        "other": query.other or None,
        "quantiles": None if query.probabilities is None else list(query.probabilities),
        "bins": query.bins,
        "where": [_predicate_json(p) for p in query.filters] or None,
        "group_by": [_key_json(k) for k in query.keys] or None,
        **dict(query.params),
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


def _list(body: Mapping[str, Any], name: str) -> list[Any]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidRequestError(f"{name!r} must be a list, got {type(value).__name__}")
    return value


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = plain_number(body.get(name))  # a dict built in Python may hold NumPy scalars
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"{name!r} must be a number, got {value!r}")
    return value


def _budget_number(body: Mapping[str, Any], name: str) -> float | Decimal | None:
    """ε or δ: a JSON number, or an exact decimal string (``"0.341279519435449196"``) read
    exactly, so that a request of an 18-digit ε is not rounded above it by a float."""
    value = body.get(name)
    if isinstance(value, str):
        from blockbudget.budget import to_decimal
        from blockbudget.errors import InvalidBudgetError

        try:
            dec = to_decimal(value, name=name)
        except InvalidBudgetError as exc:
            raise InvalidRequestError(str(exc)) from None
        if not dec.is_finite():
            raise InvalidRequestError(f"{name!r} must be finite, got {value!r}")
        return dec
    return _number(body, name)


def _object(item: Any, fields: set[str], what: str) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise InvalidRequestError(f"each {what} is an object, got {item!r}")
    extra = sorted(set(map(str, item)) - fields)
    if extra:
        raise InvalidRequestError(f"a {what} takes only {sorted(fields)}; unknown {extra}")
    return item


def _where(items: list[Any]) -> tuple[Predicate, ...]:
    out = []
    for item in items:
        obj = _object(item, {"column", "op", "value"}, "filter")
        op, raw = obj.get("op"), obj.get("value")
        if not isinstance(op, str):
            raise InvalidRequestError(f"a filter's op is a string, got {op!r}")
        if isinstance(raw, list):
            value: Any = [literal_from_json(v) for v in raw]
        else:
            value = None if raw is None else literal_from_json(raw)
        if (parse_op(op) in (Op.IN, Op.NOT_IN)) != isinstance(raw, list):
            raise InvalidRequestError(
                f"{op!r} takes a list of values for 'in' and 'not in' and one value otherwise, "
                f"got {raw!r}"
            )
        out.append(make_predicate(obj.get("column"), op, value))  # type: ignore[arg-type]
    return tuple(out)


def _group_by(items: list[Any]) -> tuple[GroupKey, ...]:
    out = []
    for item in items:
        obj = _object(item, {"column", "domain"}, "group-by key")
        domain = obj.get("domain")
        if domain is not None and not isinstance(domain, list):
            raise InvalidRequestError(f"a group-by domain is a list, got {domain!r}")
        values = None if domain is None else [literal_from_json(v) for v in domain]
        out.append(make_group_key(obj.get("column"), values))  # type: ignore[arg-type]
    return tuple(out)


def from_dict(body: Mapping[str, Any]) -> Query:
    """The query a JSON form describes (see the module docstring).

    Raises:
        InvalidRequestError: an unknown field or version, a value of the wrong type, or a
            query :class:`Query` refuses.
    """
    if not isinstance(body, Mapping):
        raise InvalidRequestError(f"a query is a JSON object, got {type(body).__name__}")
    fields = _FIELDS | set(all_params())
    unknown = sorted(set(map(str, body)) - fields)
    if unknown:
        raise InvalidRequestError(f"unknown query field(s) {unknown}; known: {sorted(fields)}")
    version = body.get("version", VERSION)
    if isinstance(version, bool) or version not in range(1, VERSION + 1):
        raise InvalidRequestError(f"query version {version!r} is not supported (1 to {VERSION})")
    if version < 2 and _V2_FIELDS & set(body):
        raise InvalidRequestError(
            f"{sorted(_V2_FIELDS & set(body))} need query version 2; a version-1 form is a "
            "Laplace query"
        )
    mechanism = body.get("mechanism", NoiseKind.LAPLACE.value)
    if not isinstance(mechanism, str):
        raise InvalidRequestError(f"'mechanism' must be a string, got {mechanism!r}")
    delta = _budget_number(body, "delta")
    try:
        statistic = Statistic(body.get("statistic"))
    except ValueError:
        known = [s.value for s in Statistic]
        raise InvalidRequestError(
            f"statistic must be one of {known}, got {body.get('statistic')!r}"
        ) from None
    epsilon = _budget_number(body, "epsilon")
    if epsilon is None:
        raise InvalidRequestError("a query needs 'epsilon'")
    column = body.get("column")
    other, bins = body.get("other", False), body.get("bins")
    if not isinstance(other, bool):
        raise InvalidRequestError(f"'other' must be a boolean, got {other!r}")
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, int)):
        raise InvalidRequestError(f"'bins' must be an integer, got {bins!r}")
    cats = body.get("categories")
    probs = body.get("quantiles")
    params: dict[str, ParamValue] = {n: body[n] for n in all_params() if n in body}
    return Query(
        statistic=statistic,
        epsilon=epsilon,
        mechanism=parse_mechanism(mechanism),
        delta=0.0 if delta is None else delta,
        column=column,
        lower=_number(body, "lower"),
        upper=_number(body, "upper"),
        categories=None
        if cats is None
        else tuple(literal_from_json(c) for c in _list(body, "categories")),
        other=other,
        probabilities=None if probs is None else tuple(_list(body, "quantiles")),
        bins=bins,
        filters=_where(_list(body, "where")),
        keys=_group_by(_list(body, "group_by")),
        params=tuple(sorted(params.items())),
    )
