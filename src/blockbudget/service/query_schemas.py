"""Request and response bodies of the query routes (re-exported by
:mod:`blockbudget.service.schemas`)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from blockbudget.service.schema_fields import BudgetFloat, ContextName, Epsilon, Number, Selection
from blockbudget.service.task_schemas import RefusalOut


class QueryKind(Enum):
    """The statistics of the legacy flat-body query route."""

    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"
    HISTOGRAM = "histogram"


class QueryIn(Selection):
    """The legacy flat body of ``POST /v1/streams/{s}/queries/{kind}`` (translated to the
    query's JSON form and run by the same code as ``POST /v1/streams/{s}/query``)."""

    epsilon: BudgetFloat = Epsilon
    context: str | None = ContextName
    column: str | None = Field(default=None, min_length=1, max_length=200)
    lower: Number | None = Field(default=None, allow_inf_nan=False)
    upper: Number | None = Field(default=None, allow_inf_nan=False)
    categories: list[str] | None = Field(default=None, min_length=1, max_length=10_000)


class QueryOut(BaseModel):
    """A legacy DP answer with its public metadata: never a row, never an exact count."""

    kind: str
    value: float | list[float] | dict[str, float]
    cost: dict[str, Any]
    blocks: list[str]
    context: str
    noise: str
    secure_noise: bool


class QueryRunIn(Selection):
    """A query in its JSON form (docs/queries.md; validated by ``blockbudget.query.from_dict``)
    and where to run it."""

    query: dict[str, Any] = Field(
        description="the query's JSON form: statistic, epsilon, column, lower, upper, "
        "categories, other, quantiles, bins, where, group_by; version 2 adds mechanism "
        "(laplace | gaussian) and delta (docs/queries.md)"
    )
    context: str | None = ContextName
    reservation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="run on this open reservation of the caller's (e.g. a scheduler's grant) "
        "instead of reserving: its blocks are read and the draw comes out of it (no "
        "'blocks' or 'last' then)",
    )


class PartOut(BaseModel):
    """One noisy part: its Laplace scale, sensitivity, ε share, coordinates and the half-width
    of each coordinate's 95% interval."""

    name: str
    noise: str
    scale: float
    sensitivity: float
    epsilon: str | None
    size: int
    half_width: float


class GroupOut(BaseModel):
    """One declared group's answer (``key`` is empty without group-by)."""

    key: list[Any]
    value: Any
    interval: list[float] | None


class QueryResultOut(BaseModel):
    """A DP answer and its public metadata (never a row, never an exact count)."""

    query: dict[str, Any]
    stream: str
    context: str
    blocks: list[str]
    cost: dict[str, Any]
    parts: list[PartOut]
    noise: str
    secure_noise: bool
    resolution: float | None
    confidence: float
    groups: list[GroupOut]
    value: Any = None
    interval: list[float] | None = None


class DryRunOut(BaseModel):
    """A query's price: nothing was reserved, sealed or charged."""

    query: dict[str, Any]
    stream: str
    context: str
    blocks: list[str]
    cost: dict[str, Any]
    reserve: dict[str, Any]
    parts: list[PartOut]
    noise: str
    affordable: list[bool]
    ok: bool
    resolution: float | None
    refusal: RefusalOut | None = Field(
        default=None,
        description="when not ok: per block that cannot afford the reservation, what remains "
        "in the context and the shortfall, and the next step (as a refused task's)",
    )
