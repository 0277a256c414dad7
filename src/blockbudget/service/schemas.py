"""Request and response bodies of the HTTP API (pydantic; they make the OpenAPI schema).

Budgets travel as numbers (ε ≥ 0, 0 ≤ δ < 1, finite); the platform reads a float as its
shortest decimal (:class:`blockbudget.budget.Budget`), so ``0.1`` is exactly 0.1; a budget sent
as a string must be ASCII decimal text (:data:`blockbudget.budget.DECIMAL_TEXT`: no spaces,
underscores or non-ASCII digits). No response
model carries a data row: DP answers, budgets, block keys and audit events only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from blockbudget.service.auth import Permission, Role
from blockbudget.service.params import (
    CONTEXT_PATTERN,
    INGEST_ID_PATTERN,
    PRINCIPAL_PATTERN,
    STREAM_PATTERN,
    ContextItem,
)
from blockbudget.service.query_schemas import DryRunOut as DryRunOut
from blockbudget.service.query_schemas import GroupOut as GroupOut
from blockbudget.service.query_schemas import PartOut as PartOut
from blockbudget.service.query_schemas import QueryIn as QueryIn
from blockbudget.service.query_schemas import QueryKind as QueryKind
from blockbudget.service.query_schemas import QueryOut as QueryOut
from blockbudget.service.query_schemas import QueryResultOut as QueryResultOut
from blockbudget.service.query_schemas import QueryRunIn as QueryRunIn
from blockbudget.service.schema_fields import MIN_BUDGET, NOT_TINY, BlockName, Count, Number
from blockbudget.service.schema_fields import BudgetDecimal as BudgetDecimal
from blockbudget.service.schema_fields import BudgetFloat as BudgetFloat
from blockbudget.service.schema_fields import ContextName as ContextName
from blockbudget.service.schema_fields import Delta as Delta
from blockbudget.service.schema_fields import Epsilon as Epsilon
from blockbudget.service.schema_fields import ErrorOut as ErrorOut
from blockbudget.service.schema_fields import Name as Name
from blockbudget.service.schema_fields import RequestId as RequestId
from blockbudget.service.schema_fields import RuleName as RuleName
from blockbudget.service.schema_fields import Selection as Selection
from blockbudget.service.schema_fields import Strict as Strict
from blockbudget.service.task_schemas import AnyIn as AnyIn
from blockbudget.service.task_schemas import AttemptOut as AttemptOut
from blockbudget.service.task_schemas import FailureOut as FailureOut
from blockbudget.service.task_schemas import JobOut as JobOut
from blockbudget.service.task_schemas import PipelineIn as PipelineIn
from blockbudget.service.task_schemas import PipelineKind as PipelineKind
from blockbudget.service.task_schemas import PipelineWorkIn as PipelineWorkIn
from blockbudget.service.task_schemas import ProviderIn as ProviderIn
from blockbudget.service.task_schemas import QueueOut as QueueOut
from blockbudget.service.task_schemas import RangeIn as RangeIn
from blockbudget.service.task_schemas import SchedulerIn as SchedulerIn
from blockbudget.service.task_schemas import SchedulerOut as SchedulerOut
from blockbudget.service.task_schemas import SelectorIn as SelectorIn
from blockbudget.service.task_schemas import ShortfallOut as ShortfallOut
from blockbudget.service.task_schemas import Significance as Significance
from blockbudget.service.task_schemas import TaskIn as TaskIn
from blockbudget.service.task_schemas import TaskKind as TaskKind
from blockbudget.service.task_schemas import TaskOut as TaskOut
from blockbudget.service.task_schemas import WaitingOut as WaitingOut
from blockbudget.store.model import MAX_STREAM_NAME, OnOverlap


class PrincipalIn(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=PRINCIPAL_PATTERN)
    role: Role
    contexts: list[ContextItem] = Field(default_factory=list, max_length=64)


class PrincipalOut(BaseModel):
    name: str
    role: Role
    contexts: list[str]
    streams: dict[str, Permission]


class StreamAccessOut(BaseModel):
    """One principal's right on one stream: what a stream's owner (not an admin) gets back
    when it grants or revokes READ — never the rest of the principal's record."""

    principal: str
    stream: str
    permission: Permission | None


class NewKeyOut(BaseModel):
    """A freshly issued API key: shown once, stored only as a hash."""

    principal: PrincipalOut
    api_key: str


class ContextsIn(Strict):
    contexts: list[ContextItem] = Field(max_length=64)


class AclIn(Strict):
    permission: Permission


class ContextIn(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=CONTEXT_PATTERN)
    description: str = Field(default="", max_length=1000)


class ContextOut(BaseModel):
    name: str
    description: str
    created_at: float
    closed_at: float | None = None


class StreamIn(Strict):
    name: str = Field(min_length=1, max_length=MAX_STREAM_NAME, pattern=STREAM_PATTERN)
    epsilon: BudgetFloat = Field(
        ge=MIN_BUDGET, le=1e6, allow_inf_nan=False, description="ε_g per block"
    )
    delta: BudgetFloat = Field(
        default=1e-6,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="δ_g",
        json_schema_extra=NOT_TINY,
    )
    accounting: RuleName = "basic"
    by: Literal["time", "user", "attribute"] = "time"
    column: str = Field(default="time", min_length=1, max_length=200)
    window_seconds: Count = Field(default=86_400, ge=1, le=10 * 366 * 86_400)
    ids_per_block: Count = Field(default=1000, ge=1, le=10**9)
    rows_per_user: Count = Field(default=1, ge=1, le=10**6)
    late_policy: Literal["new_block", "drop", "reject"] | None = None
    description: str = Field(default="", max_length=1000)


class StreamOut(BaseModel):
    name: str
    policy: dict[str, str]
    accounting: str
    unit: str
    column: str
    blocks: int
    description: str
    permission: str | None


class IngestIn(Strict):
    """Rows as JSON records (``[{"time": "2024-03-01T10:00", "delay": 3.5}, …]``); they are
    read exactly like a CSV file with those columns. ``text/csv`` bodies are accepted too."""

    records: list[dict[str, Any]] = Field(min_length=1, max_length=1_000_000)
    ingest_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=INGEST_ID_PATTERN
    )
    on_overlap: OnOverlap | None = None


class OverlapOut(BaseModel):
    """How the rows overlapped stored rows: ``rows`` whose block key already had rows (per
    key in ``keys``); under ``refuse`` and ``skip-duplicates`` (``checked``) the exact
    duplicates of stored rows (per key in ``duplicates``: shown to admins only, None for an
    owner) and those left out."""

    policy: str
    rows: int
    keys: dict[str, int]
    checked: bool
    duplicate_rows: int
    duplicates: dict[str, int] | None
    skipped_rows: int


class IngestOut(BaseModel):
    """What an ingest did (201), or, with ``repeat`` true (200), what the first ingest of
    this ``ingest_id`` did: nothing changed."""

    rows: int
    new_blocks: list[str]
    appended_blocks: list[str]
    late_rows: int
    dropped_rows: int = 0
    sealed_blocks: list[str] = []
    ingest_id: str = ""
    content_hash: str = ""
    repeat: bool = False
    ingested_at: datetime | None = None
    overlap: OverlapOut | None = None


class BlockOut(BaseModel):
    """A block's budget in each context; ``rows`` only for its owners and admins (exact counts
    are statistics of the data). On a user- or attribute-blocked stream an analyst gets an
    opaque ``block_id`` (``stream/b…``) and ``key`` (``b…``) instead of the user-id range or
    attribute value."""

    block_id: str
    key: str
    sealed: bool
    retired: bool
    remaining_fraction: dict[str, float]
    #: per context, the exact remaining budget as decimal strings: ``{"epsilon", "delta"}``
    #: (basic: what is left; strong: the largest ε of one more pure charge and the δ left) or
    #: ``{"rdp": [...]}`` per order of the grid; null once the block is retired
    remaining: dict[str, dict[str, Any] | None]
    #: the same for people: e.g. ``(ε=0.3, δ=1e-06)`` or ``retired``
    remaining_display: dict[str, str]
    rows: int | None = None
    retiring: bool | None = Field(
        default=None,
        description="live and under 10% left in every open context; null for a viewer who "
        "does not see every open context (analysts; owners not bound to them all)",
    )
    retiring_in: dict[str, bool] = Field(
        default_factory=dict,
        description="per context shown: live and under 10% left there (the same for every "
        "viewer of that context)",
    )


class ReserveIn(Selection):
    epsilon: BudgetFloat = Epsilon
    delta: BudgetFloat = Delta
    context: str | None = ContextName
    ttl_seconds: Number = Field(default=600.0, gt=0, le=7 * 86_400, allow_inf_nan=False)
    request_id: str | None = RequestId


class ReservationOut(BaseModel):
    id: str
    blocks: list[str]
    context: str
    cost: dict[str, Any]
    state: str
    holder: str | None
    expires_at: float
    #: True when ``POST .../reservations`` replayed an earlier request with the same
    #: ``request_id``: nothing was reserved now, and ``state`` is the reservation's current one.
    replayed: bool = False
    #: Per block: ``block``, ``drawn`` (None once closed) and ``left``, exact decimal strings
    #: (:mod:`blockbudget.service.reservation_usage`).
    usage: list[dict[str, Any]] = Field(default_factory=list)


class DrawIn(Strict):
    epsilon: BudgetFloat = Epsilon
    delta: BudgetFloat = Delta
    blocks: list[BlockName] | None = Field(default=None, min_length=1, max_length=10_000)
    request_id: str | None = RequestId


class ChargeIn(Strict):
    blocks: list[BlockName] = Field(min_length=1, max_length=10_000)
    epsilon: BudgetFloat = Epsilon
    delta: BudgetFloat = Delta
    context: str | None = ContextName
    request_id: str | None = RequestId


class ChargeOut(BaseModel):
    request_id: str
    blocks: list[str]
    context: str
    cost: dict[str, Any]
    reservation_id: str | None
    seq: int


class RetireOut(BaseModel):
    retired: list[str]


class EventOut(BaseModel):
    seq: int
    ts: float
    kind: str
    request_id: str | None
    context: str | None
    payload: dict[str, Any]
    hash: str


class VerifyOut(BaseModel):
    ok: bool
    events: int
    blocks: int
    contexts: int
    problems: list[str]
    notes: list[str] = Field(
        default_factory=list,
        description="findings that are not problems: blocks spent under a rule version "
        "beyond the bound it was later capped at (docs/accounting.md)",
    )


class HeatmapOut(BaseModel):
    """Consumed fraction of each block's budget (rows) at the end of each time bucket
    (columns), per context."""

    blocks: list[str]
    retired: list[str]
    retired_at: dict[str, int] = Field(description="the bucket in which each block retired")
    times: list[float] = Field(description="the end of each bucket (Unix seconds, UTC)")
    start: float = Field(default=0.0, description="the start of the first bucket")
    contexts: dict[str, list[list[float]]]
    remaining: dict[str, list[list[str]]] = Field(
        default_factory=dict, description="the exact remaining budget of each cell"
    )


class SeriesOut(BaseModel):
    """Remaining budget over time per context: the mean remaining fraction of the shown
    blocks that existed at the end of each heatmap bucket (a retired block counts 0)."""

    times: list[float]
    contexts: dict[str, list[float | None]]


class AlertOut(BaseModel):
    """Live blocks with less than ``below`` of their budget left in one context."""

    stream: str
    context: str
    below: float
    blocks: list[str]
    lowest: float


class DashboardOut(BaseModel):
    stream: str
    streams: list[str]
    policy: dict[str, str]
    blocks: list[BlockOut]
    #: per context shown, the blocks retiring there (live, under 10% left in it)
    retiring: dict[str, list[str]]
    #: the blocks retiring in every open context; null unless the viewer sees them all
    retiring_everywhere: list[str] | None = None
    heatmap: HeatmapOut
    series: SeriesOut | None = None
    alert_below: float = 0.1
    alerts: list[AlertOut] = Field(default_factory=list)
    extras: dict[str, Any]


class ChargeBatchIn(Strict):
    """Independent direct charges (each all-or-nothing on its own)."""

    charges: list[ChargeIn] = Field(min_length=1, max_length=1000)


class ChargeResult(BaseModel):
    ok: bool
    charge: ChargeOut | None = None
    status: int | None = None
    error: str | None = None
    detail: str | None = None


class ChargeBatchOut(BaseModel):
    results: list[ChargeResult]
