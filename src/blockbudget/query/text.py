"""The command line's short forms of filters, group-by keys and literals, as JSON-form pieces.

``--where "dest == BOS"``, ``--where "dep_delay > 30"``, ``--where "carrier in AA,UA"``,
``--where "tail is null"`` and ``--group-by "origin=EWR,JFK,LGA"`` become the JSON form's
``where`` and ``group_by`` entries (:mod:`blockbudget.query.jsonform`), which then go through the
one validator. A literal is read as JSON when it parses as JSON (``30``, ``2.5``, ``true``,
``"17"`` — quote a number to make it a string), as a date or timestamp when it is ISO 8601
(``2024-03-01``, ``2024-03-01T08:00``), and as a plain string otherwise.

Example:
    >>> parse_filter("dep_delay > 30")
    {'column': 'dep_delay', 'op': '>', 'value': 30}
    >>> parse_group_by("origin=EWR,JFK")
    {'column': 'origin', 'domain': ['EWR', 'JFK']}
"""

from __future__ import annotations

import json
import re
from typing import Any

from blockbudget.errors import InvalidRequestError

_OPS = ("is not null", "is null", "not in", "in", "==", "!=", "<=", ">=", "<", ">")
_FILTER = re.compile(
    r"^\s*(?P<column>[^\s=!<>]+)\s*(?P<op>is not null|is null|not in|in|==|!=|<=|>=|<|>)"
    r"(?P<rest>.*)$",
    re.IGNORECASE,
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:\d{2}|Z)?$")


def parse_literal(text: str) -> Any:
    """A literal's JSON form from its command-line text (see the module docstring)."""
    raw = text.strip()
    if _DATE.match(raw):
        return {"date": raw}
    if _DATETIME.match(raw):
        return {"datetime": raw.replace("Z", "+00:00")}
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, str | bool | int | float):
        return value
    return raw


def _split(text: str) -> list[Any]:
    """Comma-separated literals; ``[...]`` is read as a JSON array only when it is one (so
    ``["a,b", "[c]"]`` keeps its commas and brackets), else the raw text is split (so a value
    like ``[x]`` keeps its brackets)."""
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]"):
        try:
            array = json.loads(inner)
        except ValueError:
            array = None
        if isinstance(array, list):
            return [_json_item(v, text) for v in array] or _empty(text)
    items = [t for t in (p.strip() for p in inner.split(",")) if t]
    return [parse_literal(t) for t in items] or _empty(text)


def _json_item(value: Any, text: str) -> Any:
    """One item of a JSON array: a number or boolean as it is, a string as the literal it
    names (a date or timestamp in ISO 8601, else the string itself)."""
    if isinstance(value, str):
        return parse_literal(value) if (_DATE.match(value) or _DATETIME.match(value)) else value
    if isinstance(value, bool | int | float):
        return value
    raise InvalidRequestError(
        f"a JSON list of values holds strings, numbers and booleans, got {value!r} in {text!r}"
    )


def _empty(text: str) -> list[Any]:
    raise InvalidRequestError(f"expected a comma-separated list of values, got {text!r}")


def parse_list(text: str) -> list[Any]:
    """Comma-separated literals (categories, a group-by domain, an ``in`` list)."""
    return _split(text)


def parse_filter(text: str) -> dict[str, Any]:
    """``COLUMN OP [VALUE]`` as a JSON-form filter.

    Raises:
        InvalidRequestError: text that is not a filter.
    """
    m = _FILTER.match(text)
    if m is None:
        raise InvalidRequestError(
            f"a filter reads 'COLUMN OP VALUE' with OP one of {list(_OPS)}, got {text!r}"
        )
    op, rest = m["op"].lower(), m["rest"].strip()
    out: dict[str, Any] = {"column": m["column"], "op": op}
    if op in ("is null", "is not null"):
        if rest:
            raise InvalidRequestError(f"{op!r} takes no value, got {rest!r}")
    elif op in ("in", "not in"):
        out["value"] = _split(rest)
    elif not rest:
        raise InvalidRequestError(f"filter {text!r} needs a value after {op!r}")
    else:
        out["value"] = parse_literal(rest)
    return out


def parse_group_by(text: str) -> dict[str, Any]:
    """``COLUMN=V1,V2,...`` as a JSON-form group-by key (its declared domain).

    Raises:
        InvalidRequestError: a key without a declared domain.
    """
    column, sep, domain = text.partition("=")
    if not sep or not column.strip():
        raise InvalidRequestError(
            f"a group-by key reads COLUMN=V1,V2,... (its declared public domain), got {text!r}"
        )
    return {"column": column.strip(), "domain": _split(domain)}


def parse_param(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as one of a statistic's own parameters (the value read as a JSON number
    when it is one, else as text).

    Example:
        >>> parse_param("k=3"), parse_param("column2 = y")
        (('k', 3), ('column2', 'y'))

    Raises:
        InvalidRequestError: no ``=`` or no name.
    """
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise InvalidRequestError(f"a statistic's parameter reads NAME=VALUE, got {text!r}")
    try:
        value = json.loads(raw.strip())
    except ValueError:
        value = raw.strip()
    if not isinstance(value, int | float) or isinstance(value, bool):
        value = raw.strip()
    return name.strip(), value
