"""Request and response bodies of the HTTP API (pydantic; they make the OpenAPI schema).

Budgets travel as numbers (ε ≥ 0, 0 ≤ δ < 1, finite); the platform reads a float as its
shortest decimal (:class:`blockbudget.budget.Budget`), so ``0.1`` is exactly 0.1; a budget sent
as a string must be ASCII decimal text (:data:`blockbudget.budget.DECIMAL_TEXT`: no spaces,
underscores or non-ASCII digits). No response
model carries a data row: DP answers, budgets, block keys and audit events only.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from blockbudget.budget import check_decimal_text
from blockbudget.errors import InvalidBudgetError
from blockbudget.service.auth import Permission, Role
from blockbudget.store.model import OnOverlap
from blockbudget.tasks.pipeline_kinds import pipeline_kinds

Name = Field(min_length=1, max_length=256)
#: A request's context; omitted (None), it is the principal's only bound context (else 422).
ContextName = Field(
    default=None,
    min_length=1,
    max_length=64,
    description="context that pays (default: the caller's only bound context)",
)


def _decimal_text(value: object) -> object:
    """A budget sent as text must be exact ASCII decimal text (pydantic alone would read
    ``" 1"`` or ``"1_0"``); numbers pass unchanged."""
    if isinstance(value, str):
        try:
            check_decimal_text(value, name="a budget")
        except InvalidBudgetError as exc:
            raise ValueError(str(exc)) from None
    return value


def _rule_name(value: str) -> str:
    """An accounting rule's name, checked against the registry (the message lists the
    registered rules)."""
    from blockbudget.accounting import rule_names

    names = rule_names()
    if value not in names:
        raise ValueError(f"unknown accounting rule {value[:40]!r}; registered: {', '.join(names)}")
    return value


def _rule_enum(schema: dict[str, Any]) -> None:
    """The OpenAPI ``enum`` of an accounting field: the registered rules, read when the schema
    is built (so a rule registered at import time is listed)."""
    from blockbudget.accounting import rule_names

    schema["enum"] = list(rule_names())


#: The name of a registered accounting rule (``basic``, ``strong``, ``rdp``, ``gdp``, …).
RuleName = Annotated[
    str,
    AfterValidator(_rule_name),
    Field(max_length=64, json_schema_extra=_rule_enum, description="accounting rule"),
]

#: ε or δ as a float: a JSON number, or ASCII decimal text.
BudgetFloat = Annotated[float, BeforeValidator(_decimal_text)]
#: ε or δ read exactly: a JSON number, or ASCII decimal text.
BudgetDecimal = Annotated[Decimal, BeforeValidator(_decimal_text)]
Epsilon = Field(gt=0, le=1e6, allow_inf_nan=False, description="ε per block")
Delta = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False, description="δ per block")
RequestId = Field(default=None, min_length=1, max_length=200, description="idempotency key")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    """Every refusal: the error class and a message stating the rule and the bad value."""

    error: str
    detail: str
    code: str | None = Field(
        default=None, description="a stable code where the cause is only in the server log"
    )
    refusal: dict[str, Any] | None = Field(
        default=None,
        description="a budget refusal (409 BudgetExceededError): the context and, per refusing "
        "block, the exact remaining budget and shortfall as decimal strings",
    )


class PrincipalIn(Strict):
    name: str = Field(min_length=1, max_length=64)
    role: Role
    contexts: list[str] = Field(default_factory=list, max_length=64)


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
    contexts: list[str] = Field(max_length=64)


class AclIn(Strict):
    permission: Permission


class ContextIn(Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str = Field(default="", max_length=1000)


class ContextOut(BaseModel):
    name: str
    description: str
    created_at: float
    closed_at: float | None = None


class StreamIn(Strict):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    epsilon: BudgetFloat = Field(gt=0, le=1e6, allow_inf_nan=False, description="ε_g per block")
    delta: BudgetFloat = Field(default=1e-6, ge=0, lt=1, allow_inf_nan=False, description="δ_g")
    accounting: RuleName = "basic"
    by: Literal["time", "user", "attribute"] = "time"
    column: str = Field(default="time", min_length=1, max_length=200)
    window_seconds: int = Field(default=86_400, ge=1, le=10 * 366 * 86_400)
    ids_per_block: int = Field(default=1000, ge=1, le=10**9)
    rows_per_user: int = Field(default=1, ge=1, le=10**6)
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
    ingest_id: str | None = Field(default=None, min_length=1, max_length=128)
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


class Selection(Strict):
    """Which blocks: explicit ids/keys, or the newest ``last`` affordable ones."""

    blocks: list[str] | None = Field(default=None, min_length=1, max_length=10_000)
    last: int | None = Field(default=None, ge=1, le=100_000)


class ReserveIn(Selection):
    epsilon: BudgetFloat = Epsilon
    delta: BudgetFloat = Delta
    context: str | None = ContextName
    ttl_seconds: float = Field(default=600.0, gt=0, le=7 * 86_400, allow_inf_nan=False)
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
    blocks: list[str] | None = Field(default=None, min_length=1, max_length=10_000)
    request_id: str | None = RequestId


class ChargeIn(Strict):
    blocks: list[str] = Field(min_length=1, max_length=10_000)
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
    lower: float | None = Field(default=None, allow_inf_nan=False)
    upper: float | None = Field(default=None, allow_inf_nan=False)
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


def _registered_kind(value: str) -> str:
    kinds = pipeline_kinds()
    if value not in kinds:
        raise ValueError(f"unknown pipeline kind; one of {sorted(kinds)}")
    return value


#: A pipeline kind registered with the task queue (:mod:`blockbudget.tasks.pipeline_kinds`; the
#: application's modules that ``blockbudget serve`` loads): another name is refused as invalid.
PipelineKind = Annotated[
    str,
    Field(min_length=1, max_length=100, description="a registered pipeline kind"),
    AfterValidator(_registered_kind),
]


class PipelineIn(Strict):
    kind: PipelineKind
    target: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="the SLA's τ")
    context: str | None = ContextName
    epsilon0: BudgetFloat = Field(default=0.0625, gt=0, le=10, allow_inf_nan=False)
    max_epsilon: BudgetFloat = Field(default=1.0, gt=0, le=10, allow_inf_nan=False)
    min_window: int = Field(default=1, ge=1, le=10_000)


class AttemptOut(BaseModel):
    iteration: int
    epsilon: str
    delta: str
    blocks: int
    outcome: str


class FailureOut(BaseModel):
    """Why a job failed: a stable code and a message written by the service (the cause, which
    may quote data, is only in the server log)."""

    code: str
    message: str


class JobOut(BaseModel):
    """A pipeline job: its state and each attempt's ACCEPT / REJECT / RETRY."""

    id: str
    owner: str
    stream: str
    context: str
    kind: str
    target: float
    state: str
    error: FailureOut | None
    attempts: list[AttemptOut]
    model: str | None
    submitted_at: float


class TaskKind(Enum):
    """What a task's grant pays for (:class:`blockbudget.tasks.WorkKind`)."""

    QUERY = "query"
    BUDGET = "budget"
    PIPELINE = "pipeline"


class RangeIn(Strict):
    """Any ``k`` blocks whose time window starts in [start, end)."""

    k: int = Field(ge=1, le=100_000)
    start: datetime
    end: datetime


class AnyIn(Strict):
    """Any blocks of the stream: at most ``k`` (None: no cap), at least ``min_k``."""

    k: int | None = Field(default=None, ge=1, le=100_000)
    min_k: int = Field(default=1, ge=1, le=100_000)


class SelectorIn(Strict):
    """Which blocks a task may use: exactly one of ``named`` (ids or keys; opaque ids on user
    and attribute streams), ``newest`` (the n newest live blocks, bound when the task enters the
    scheduler), ``range`` and ``any`` (the scheduler chooses)."""

    named: list[str] | None = Field(default=None, min_length=1, max_length=10_000)
    newest: int | None = Field(default=None, ge=1, le=100_000)
    range: RangeIn | None = None
    any: AnyIn | None = None


class PipelineWorkIn(Strict):
    """A privacy-adaptive training pipeline run as a task (see ``PipelineIn``)."""

    kind: PipelineKind
    target: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="the SLA's τ")
    epsilon0: BudgetFloat = Field(default=0.0625, gt=0, le=10, allow_inf_nan=False)
    max_epsilon: BudgetFloat = Field(default=1.0, gt=0, le=10, allow_inf_nan=False)
    min_window: int = Field(default=1, ge=1, le=10_000)


class ProviderIn(BaseModel):
    """A live significance provider: ``{"provider": name, ...its parameters}``."""

    model_config = ConfigDict(extra="allow")
    provider: str = Field(min_length=1, max_length=64)


Significance = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]


class TaskIn(Selection):
    """A task for the stream's scheduler (docs/service.md, "Tasks").

    ``kind`` ``query`` carries ``query`` (its JSON form; the demand is its priced reservation),
    ``budget`` carries ``epsilon``/``delta`` or ``rdp`` (a curve at the stream's RDP orders),
    ``pipeline`` carries ``pipeline``. The blocks come from ``selector``; the older body
    (``epsilon``/``delta`` with ``blocks`` or ``last``) is still taken as a budget task.
    """

    kind: TaskKind = TaskKind.BUDGET
    selector: SelectorIn | None = None
    query: dict[str, Any] | None = Field(
        default=None, description="kind query: the query's JSON form (docs/queries.md)"
    )
    epsilon: BudgetDecimal | None = Field(
        default=None,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="kind budget: ε per block (a number, or an exact decimal string)",
    )
    delta: BudgetDecimal = Field(
        default=Decimal(0),
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="δ per block (a number, or an exact decimal string)",
    )
    rdp: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None, min_length=1, max_length=64, description="kind budget: RDP ε(α) per block"
    )
    pipeline: PipelineWorkIn | None = None
    context: str | None = ContextName
    significance: dict[str, Significance] | ProviderIn | None = Field(
        default=None,
        description="p_ij per block ({block: p}) or a live provider ({'provider': name, ...})",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=30 * 86_400, allow_inf_nan=False, description="deadline"
    )
    request_id: str | None = RequestId


class ShortfallOut(BaseModel):
    """One block a waiting task could use that cannot afford its demand now: what the task
    needs there and what the block has left in the task's context."""

    block: str
    needs: dict[str, Any] = Field(
        description="the demand on the block, exact: {epsilon, delta} or {rdp: [...]}"
    )
    has: dict[str, Any] | None = Field(
        description="what the block has left for one more charge, same form (null: retired)"
    )
    retired: bool = False


class WaitingOut(BaseModel):
    """Why a task waits: the scheduler and what it waits for; how many of the blocks it could
    use can afford it now; the others."""

    reason: str
    affordable: int
    shortfall: list[ShortfallOut]


class TaskOut(BaseModel):
    """A task as its principal (or an admin) sees it."""

    id: str
    principal: str
    stream: str
    context: str
    kind: str
    selector: dict[str, Any]
    demand: dict[str, Any]
    epsilon: str | None = Field(description="the demand's ε ((ε, δ) demands only)")
    delta: str | None
    query: dict[str, Any] | None = None
    pipeline: dict[str, Any] | None = None
    blocks: list[str]
    significance: dict[str, Any] | None
    submitted_at: float
    deadline: float | None
    state: str
    reservation_id: str | None
    decided_at: float | None
    note: str
    request_id: str | None = None
    why: WaitingOut | None = None
    result: dict[str, Any] | None = None


class QueueOut(BaseModel):
    scheduler: str
    tasks: list[TaskOut]


class SchedulerIn(Strict):
    spec: str = Field(
        min_length=1, max_length=200, description="name[:key=value,...], e.g. dpf-n:n=10"
    )


class SchedulerOut(BaseModel):
    stream: str
    scheduler: str
    pipeline_scheduler: str


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
