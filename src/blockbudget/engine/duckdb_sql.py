"""The SQL text of a plan for DuckDB: one statement, every literal a named parameter.

Identifiers are quoted (``"`` doubled); every value — paths, predicate literals, domains,
bounds — is bound as a ``$pN`` parameter, never written into the text. The fixed-point encoding
is written with the same double operations, in the same order, as
:meth:`~blockbudget.engine.plan.FixedPoint.encode`, and bins as :meth:`~blockbudget.engine.plan.
Bins.index`, so the integers equal the reference engine's. NaN reads as null: a float column's
comparisons, value aggregates and group keys carry an explicit ``NOT isnan(c)`` (DuckDB orders
NaN above every number and calls it equal to itself).

Parquet min/max statistics exclude NaN (as the format requires), and DuckDB's statistics
propagation takes them as proof that a column holds no NaN, folding ``isnan(c)`` to false
(duckdb/duckdb#25521, open): the engine's database therefore runs with the
``statistics_propagation`` optimizer disabled, and ``IS_NULL`` on a float column is written as
``coalesce(isnan(c), TRUE)``, a form the scan does not prune by min/max. The contract tests hold
files whose NaN lies outside their statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from blockbudget.engine.plan import AggKind, Aggregate, FixedPoint, Op, Plan, Predicate
from blockbudget.errors import InternalError, InvalidRequestError

#: The names of the stored-order columns read_parquet exposes (virtual columns).
FILE_INDEX = "file_index"
FILE_ROW = "file_row_number"
#: Bits of a row's position within its file in the one-integer stored-order key.
ROW_BITS = 40
#: The alias of a row's stored-order position in a bounded row stream.
ORDER_ALIAS = "__bb_position"

_COMPARE = {Op.EQ: "=", Op.NE: "<>", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}


def quote(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Params:
    """Named parameters collected while the text is written."""

    values: dict[str, Any] = field(default_factory=dict)

    def add(self, value: Any) -> str:
        """Bind ``value``; the placeholder to write."""
        name = f"p{len(self.values)}"
        self.values[name] = value
        return f"${name}"

    def many(self, values: Sequence[Any]) -> str:
        """Bind each of ``values``; ``(?, ?, ...)``."""
        return "(" + ", ".join(self.add(v) for v in values) + ")"


@dataclass(frozen=True)
class Columns:
    """Which columns are floating point (they need the NaN guards), and each column's Arrow
    type (a literal of exactly that type is cast to it in SQL, :func:`sql_type`)."""

    floats: frozenset[str]
    doubles: frozenset[str] = frozenset()
    types: Mapping[str, Any] = field(default_factory=dict)

    def not_nan(self, column: str) -> str | None:
        return f"NOT isnan({quote(column)})" if column in self.floats else None

    def literal(self, params: Params, column: str, value: Any) -> str:
        """``value`` bound as a parameter of ``column``'s own type: DuckDB then never casts the
        column to the literal's type (``Decimal('1.0')`` binds as ``DECIMAL(2,1)``, and against
        ``DECIMAL(38,0)`` the common type needs 39 digits: rows of 37 integer digits raise).
        The cast of a parameter is constant-folded."""
        from blockbudget.engine.kernels import exact_scalar

        arrow = self.types.get(column)
        placeholder = params.add(value)
        sql = None if arrow is None else sql_type(arrow)
        if sql is None or exact_scalar(value, arrow) is value:  # not exactly of the type
            return placeholder
        return f"CAST({placeholder} AS {sql})"

    def literals(self, params: Params, column: str, values: Sequence[Any]) -> str:
        """``(..., ...)`` of :meth:`literal`."""
        return "(" + ", ".join(self.literal(params, column, v) for v in values) + ")"


_INTEGERS = {
    8: ("TINYINT", "UTINYINT"),
    16: ("SMALLINT", "USMALLINT"),
    32: ("INTEGER", "UINTEGER"),
    64: ("BIGINT", "UBIGINT"),
}
_TIMESTAMPS = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}


def sql_type(type_: Any) -> str | None:
    """The DuckDB SQL type that reads a Parquet column of Arrow type ``type_`` (None: literals
    of that type are bound as they are).

    Example:
        >>> import pyarrow as pa
        >>> sql_type(pa.uint64()), sql_type(pa.decimal128(38, 2)), sql_type(pa.timestamp("ms"))
        ('UBIGINT', 'DECIMAL(38,2)', 'TIMESTAMP_MS')
    """
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(type_):
        return sql_type(type_.value_type)
    if t.is_integer(type_):
        return _INTEGERS[type_.bit_width][0 if t.is_signed_integer(type_) else 1]
    if t.is_float32(type_) or t.is_float64(type_):
        return "FLOAT" if t.is_float32(type_) else "DOUBLE"
    if t.is_decimal(type_) and type_.precision <= 38:
        return f"DECIMAL({type_.precision},{type_.scale})"
    if t.is_timestamp(type_):
        return "TIMESTAMPTZ" if type_.tz is not None else _TIMESTAMPS[type_.unit]
    if t.is_date32(type_):
        return "DATE"
    if t.is_boolean(type_):
        return "BOOLEAN"
    if t.is_string(type_) or t.is_large_string(type_):
        return "VARCHAR"
    return None


def _and(*parts: str | None) -> str:
    kept = [p for p in parts if p]
    return " AND ".join(f"({p})" for p in kept) if kept else "TRUE"


def rows_sql(
    params: Params,
    files: Sequence[str],
    columns: Sequence[str],
    *,
    user: str | None,
    rows_per_user: int | None,
    keep_order: bool = False,
    dataset: str | None = None,
) -> str:
    """The source's rows after contribution bounding (a subquery), projected to ``columns``.

    On a user-level source a window keeps each user's first ``rows_per_user`` rows in stored
    order (file position in the list, then row number in the file); user ids are disjoint across
    blocks, so one partition per user suffices. With ``keep_order`` the stored-order position is
    kept as an extra column (:data:`ORDER_ALIAS`). With ``dataset`` the rows come from that
    registered Arrow dataset instead (no stored order: only for a source without bounding).
    """
    cols = ", ".join(quote(c) for c in columns) or "1"
    if dataset is not None:
        if (user is not None and rows_per_user is not None) or keep_order:
            raise InternalError("an Arrow dataset scan has no stored order to bound or keep")
        return f"SELECT {cols} FROM {quote(dataset)}"
    scan = f"read_parquet({params.add(list(files))})"
    if user is None or rows_per_user is None:
        return f"SELECT {cols} FROM {scan}"
    if len(files) >= 1 << (63 - ROW_BITS):
        raise InvalidRequestError(f"a source holds at most 2**{63 - ROW_BITS} part files")
    # One BIGINT key (file, row) sorts 3x faster than the pair (measured at 10M rows). It is
    # computed in an inner query: DuckDB 2.0 fails with an internal error when the window
    # orders by an expression over file_index in the same SELECT.
    position = f"(CAST({FILE_INDEX} AS BIGINT) << {ROW_BITS}) + {FILE_ROW}"
    inner = f"SELECT {cols}, {position} AS {ORDER_ALIAS} FROM {scan}"
    keep = f", {ORDER_ALIAS}" if keep_order else ""
    return (
        f"SELECT {cols}{keep} FROM ({inner}) QUALIFY row_number() OVER (PARTITION BY "
        f"{quote(user)} ORDER BY {ORDER_ALIAS}) <= {params.add(int(rows_per_user))}"
    )


def predicate_sql(params: Params, predicate: Predicate, kinds: Columns) -> str:
    """A WHERE term with the contract's null and NaN semantics."""
    c = quote(predicate.column)
    guard = kinds.not_nan(predicate.column)
    op = predicate.op
    if op is Op.IS_NULL:  # not "c IS NULL OR isnan(c)": DuckDB prunes that by min/max
        return f"coalesce(isnan({c}), TRUE)" if guard else f"{c} IS NULL"
    if op is Op.NOT_NULL:
        return _and(f"{c} IS NOT NULL", guard)
    if op in (Op.IN, Op.NOT_IN):
        assert isinstance(predicate.value, tuple)
        word = "IN" if op is Op.IN else "NOT IN"
        values = kinds.literals(params, predicate.column, predicate.value)
        return _and(f"{c} {word} {values}", guard)
    value = kinds.literal(params, predicate.column, predicate.value)
    return _and(f"{c} {_COMPARE[op]} {value}", guard)


def _encode(params: Params, column: str, kinds: Columns, fixed: FixedPoint) -> str:
    """``FixedPoint.encode`` in SQL: the same IEEE-754 double operations, in the same order.

    Two rewrites give bit-identical doubles and save time: ``y / q`` is written ``y * (1/q)``
    when ``1/q`` is a finite power of two (both are the exact real ``y·2**-k`` correctly rounded,
    so they agree for every ``y``); and ``y − 0.0`` is ``y`` for every double (−0.0 included), so
    a zero centre is left out.
    """
    x = quote(column) if column in kinds.doubles else f"CAST({quote(column)} AS DOUBLE)"
    lo, hi = params.add(float(fixed.lower)), params.add(float(fixed.upper))
    shifted = f"least(greatest({x}, {lo}), {hi})"
    if fixed.centre != 0.0:
        shifted = f"({shifted} - {params.add(float(fixed.centre))})"
    q = fixed.quantum
    inverse = 1.0 / q
    if math.isfinite(inverse) and math.frexp(inverse)[0] == 0.5 and inverse * q == 1.0:
        scaled = f"{shifted} * {params.add(inverse)}"
    else:  # 1/q overflows (q subnormal): divide, as the reference does
        scaled = f"{shifted} / {params.add(float(q))}"
    return f"CAST(floor({scaled} + 0.5) AS BIGINT)"


def aggregate_sql(params: Params, agg: Aggregate, kinds: Columns) -> str:
    """One select-list expression of an aggregate (a number, or a histogram map)."""
    if agg.column is None:
        return "count(*)"
    c = quote(agg.column)
    guard = kinds.not_nan(agg.column)
    where = f" FILTER (WHERE {guard})" if guard else ""
    if agg.kind is AggKind.COUNT:
        return f"count({c}){where}"
    if agg.kind is AggKind.SUM_PRODUCTS:
        assert agg.fixed is not None and agg.by is not None and agg.by_fixed is not None
        v = _encode(params, agg.column, kinds, agg.fixed)
        w = _encode(params, agg.by, kinds, agg.by_fixed)
        both = _and(guard, kinds.not_nan(agg.by))  # sum() skips a null product
        return f"sum(({v}) * ({w})) FILTER (WHERE {both})"
    if agg.kind in (AggKind.SUM, AggKind.SUM_SQUARES):
        assert agg.fixed is not None
        v = _encode(params, agg.column, kinds, agg.fixed)
        return f"sum({v}){where}" if agg.kind is AggKind.SUM else f"sum(({v}) * ({v})){where}"
    if agg.kind is AggKind.BINS:
        b = agg.bins
        assert b is not None
        x = f"CAST({c} AS DOUBLE)"
        lo = params.add(float(b.lower))
        clipped = f"least(greatest({x}, {lo}), {params.add(float(b.upper))})"
        raw = f"CAST(floor(({clipped} - {lo}) / {params.add(float(b.width))}) AS BIGINT)"
        return f"histogram(least({raw}, {params.add(b.count - 1)})){where}"
    assert agg.categories is not None
    if not agg.other:
        raise InternalError("a histogram without 'other' is joined in plan_sql")
    whens = " ".join(
        f"WHEN {c} = {kinds.literal(params, agg.column, v)} THEN {i}"
        for i, v in enumerate(agg.categories)
    )
    if agg.other:
        whens += f" WHEN {_and(f'{c} IS NOT NULL', guard)} THEN {agg.width - 1}"
    code = f"CASE {whens} END"
    return f"histogram({code}) FILTER (WHERE {code} IS NOT NULL)"


def plan_sql(
    plan: Plan, files: Sequence[str], kinds: Columns, *, dataset: str | None = None
) -> tuple[str, Mapping[str, Any]]:
    """The plan as one statement: group columns first, then one column per aggregate (rows
    from ``files``, or from the registered Arrow dataset named ``dataset``)."""
    params = Params()
    source = plan.source
    rows = rows_sql(
        params,
        files,
        plan.columns(),
        user=source.user_column,
        rows_per_user=source.rows_per_user,
        dataset=dataset,
    )
    # Every declared value carries its index in SQL (a join with a VALUES table), so the result
    # holds indexes only: nothing is mapped back by equality in Python, where a value DuckDB
    # matched after a conversion would not be found (a failure that depends on the data).
    # The rows are aggregated per key value first and the (few) aggregated rows then joined
    # with the domains: a key value outside its domain is dropped by the (inner) join. At 10M
    # rows this is ~15% faster than joining every row; the hash aggregate's memory grows with
    # the key's distinct values (DuckDB spills it to disk under its memory limit).
    where: list[str | None] = [predicate_sql(params, p, kinds) for p in plan.predicates]
    select = []
    for a in plan.aggregates:
        if a.kind is AggKind.CATEGORIES and not a.other:
            select.append(_declared_histogram(params, a, kinds))
        else:
            select.append(aggregate_sql(params, a, kinds))
    if not plan.group_by:
        text = f"SELECT {', '.join(select)} FROM ({rows}) AS src WHERE {_and(*where)}"
        return text, params.values
    keys = [f"src.{quote(g.column)} AS g{i}" for i, g in enumerate(plan.group_by)]
    where += [kinds.not_nan(g.column) for g in plan.group_by]
    inner = (
        f"SELECT {', '.join(keys + [f'{e} AS a{j}' for j, e in enumerate(select)])} "
        f"FROM ({rows}) AS src WHERE {_and(*where)} "
        f"GROUP BY {', '.join(f'g{i}' for i in range(len(keys)))}"
    )
    joins = "".join(
        _indexed_join(f"d{i}", f"g{i}", [kinds.literal(params, g.column, v) for v in g.domain])
        for i, g in enumerate(plan.group_by)
    )
    outs = [f"d{i}.i" for i in range(len(keys))] + [f"agg.a{j}" for j in range(len(select))]
    return f"SELECT {', '.join(outs)} FROM ({inner}) AS agg{joins}", params.values


def _declared_histogram(params: Params, agg: Aggregate, kinds: Columns) -> str:
    """DuckDB's hash histogram of the declared values (3x faster at 10M rows than a CASE or a
    join carrying the index), its keys turned into the categories' indexes in SQL: a list of
    ``[index, count]`` pairs (index −1, dropped by the caller, for a key ``list_position``
    would not find — no checked query has one; it is never an error)."""
    assert agg.column is not None and agg.categories is not None
    c = quote(agg.column)
    declared = "[" + kinds.literals(params, agg.column, agg.categories)[1:-1] + "]"
    listed = kinds.literals(params, agg.column, agg.categories)
    counts = f"histogram({c}) FILTER (WHERE {c} IN {listed})"
    index = f"coalesce(list_position({declared}, e.key), 0) - 1"
    return f"[[{index}, CAST(e.value AS BIGINT)] for e in map_entries({counts})]"


def _indexed_join(alias: str, key: str, values: Sequence[str]) -> str:
    """A join of the aggregated rows with ``(value, index)`` pairs on the key alias ``key``
    (``values`` are SQL expressions of the column's type, distinct as its values — a checked
    query's are — so a row matches at most one)."""
    pairs = ", ".join(f"({v}, {i})" for i, v in enumerate(values))
    return f" JOIN (VALUES {pairs}) AS {alias}(k, i) ON agg.{key} = {alias}.k"


def batches_sql(
    source_files: Sequence[str],
    columns: Sequence[str],
    out: Sequence[str],
    predicates: Sequence[Predicate],
    kinds: Columns,
    *,
    user: str | None,
    rows_per_user: int | None,
) -> tuple[str, Mapping[str, Any]]:
    """The bounded, filtered rows in stored order, projected to ``out``."""
    params = Params()
    bounded = user is not None and rows_per_user is not None
    rows = rows_sql(
        params, source_files, columns, user=user, rows_per_user=rows_per_user, keep_order=bounded
    )
    where = _and(*[predicate_sql(params, p, kinds) for p in predicates])
    text = f"SELECT {', '.join(quote(c) for c in out) or '1'} FROM ({rows}) AS src WHERE {where}"
    if bounded:  # the window does not keep the scan's order; a plain scan does
        text += f" ORDER BY {ORDER_ALIAS}"
    return text, params.values
