"""Request and response bodies of the pipeline-job and task-queue routes (re-exported by
:mod:`blockbudget.service.schemas`)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from blockbudget.budget import ALPHAS
from blockbudget.service.schema_fields import (
    MIN_BUDGET,
    NOT_TINY,
    BlockName,
    BudgetDecimal,
    BudgetFloat,
    ContextName,
    Count,
    Number,
    RequestId,
    Selection,
    Strict,
)
from blockbudget.tasks.pipeline_kinds import pipeline_kinds


def _registered_kind(value: str) -> str:
    kinds = pipeline_kinds()
    if value not in kinds:
        raise ValueError(f"unknown pipeline kind; one of {sorted(kinds)}")
    return value


def _kind_enum(schema: dict[str, Any]) -> None:
    """The OpenAPI ``enum`` of a pipeline kind: the registered kinds, read when the schema is
    built (none registered: no value is valid, and the schema says so with an empty ``enum``'s
    stand-in, ``not: {}``)."""
    kinds = sorted(pipeline_kinds())
    if kinds:
        schema["enum"] = kinds
    else:
        schema["not"] = {}


#: A pipeline kind registered with the task queue (:mod:`blockbudget.tasks.pipeline_kinds`; the
#: application's modules that ``blockbudget serve`` loads): another name is refused as invalid.
PipelineKind = Annotated[
    str,
    Field(
        min_length=1,
        max_length=100,
        description="a registered pipeline kind",
        json_schema_extra=_kind_enum,
    ),
    AfterValidator(_registered_kind),
]


class PipelineIn(Strict):
    kind: PipelineKind
    target: Number = Field(gt=0, le=1e6, allow_inf_nan=False, description="the SLA's τ")
    context: str | None = ContextName
    epsilon0: BudgetFloat = Field(default=0.0625, ge=MIN_BUDGET, le=10, allow_inf_nan=False)
    max_epsilon: BudgetFloat = Field(default=1.0, ge=MIN_BUDGET, le=10, allow_inf_nan=False)
    min_window: Count = Field(default=1, ge=1, le=10_000)


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

    k: Count = Field(ge=1, le=100_000)
    start: datetime
    end: datetime


class AnyIn(Strict):
    """Any blocks of the stream: at most ``k`` (None: no cap), at least ``min_k``."""

    k: Count | None = Field(default=None, ge=1, le=100_000)
    min_k: Count = Field(default=1, ge=1, le=100_000)


class SelectorIn(Strict):
    """Which blocks a task may use: exactly one of ``named`` (ids or keys; opaque ids on user
    and attribute streams), ``newest`` (the n newest live blocks, bound when the task enters the
    scheduler), ``range`` and ``any`` (the scheduler chooses)."""

    named: list[BlockName] | None = Field(default=None, min_length=1, max_length=10_000)
    newest: Count | None = Field(default=None, ge=1, le=100_000)
    range: RangeIn | None = None
    any: AnyIn | None = None


class PipelineWorkIn(Strict):
    """A privacy-adaptive training pipeline run as a task (see ``PipelineIn``)."""

    kind: PipelineKind
    target: Number = Field(gt=0, le=1e6, allow_inf_nan=False, description="the SLA's τ")
    epsilon0: BudgetFloat = Field(default=0.0625, ge=MIN_BUDGET, le=10, allow_inf_nan=False)
    max_epsilon: BudgetFloat = Field(default=1.0, ge=MIN_BUDGET, le=10, allow_inf_nan=False)
    min_window: Count = Field(default=1, ge=1, le=10_000)


class ProviderIn(BaseModel):
    """A live significance provider: ``{"provider": name, ...its parameters}``."""

    model_config = ConfigDict(extra="allow")
    provider: str = Field(min_length=1, max_length=64)


Significance = Annotated[Number, Field(ge=0, le=1e12, allow_inf_nan=False)]


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
    epsilon: Annotated[BudgetDecimal, Field(ge=MIN_BUDGET, le=1e6, allow_inf_nan=False)] | None = (
        Field(
            default=None,
            description="kind budget: ε per block (a number, or an exact decimal string)",
        )
    )
    delta: BudgetDecimal = Field(
        default=Decimal(0),
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="δ per block (a number, or an exact decimal string)",
        json_schema_extra=NOT_TINY,
    )
    rdp: (
        list[Annotated[Number, Field(ge=0, allow_inf_nan=False, json_schema_extra=NOT_TINY)]] | None
    ) = Field(
        default=None,
        min_length=len(ALPHAS),
        max_length=len(ALPHAS),
        description=f"kind budget: RDP ε(α) per block, one per order α of {list(ALPHAS)}",
    )
    pipeline: PipelineWorkIn | None = None
    context: str | None = ContextName
    significance: dict[str, Significance] | ProviderIn | None = Field(
        default=None,
        description="p_ij per block ({block: p}) or a live provider ({'provider': name, ...})",
    )
    timeout_seconds: Number | None = Field(
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


class RefusalBlockOut(BaseModel):
    """One block a refused task could use that cannot afford its demand now."""

    block: str
    remaining: dict[str, Any] | None = Field(
        description="what the block has left in the task's context, exact: {epsilon, delta} "
        "or {rdp: [...]} (null: retired)"
    )
    shortfall: dict[str, Any] | None = Field(
        description="by how much the demand exceeds it, same form (null: retired)"
    )
    retired: bool = False


class RefusalOut(BaseModel):
    """Why a refused task could not be granted, read now: how many of the blocks it may use
    can afford its demand and how many it needs, the others' remaining budget and shortfall,
    and the next step its principal can take."""

    context: str
    considered: int | None = Field(description="blocks it may use (null: not readable now)")
    affordable: int | None
    needed: int | None
    blocks: list[RefusalBlockOut]
    next: str


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
    refusal: RefusalOut | None = None
    result: dict[str, Any] | None = None


class QueueOut(BaseModel):
    scheduler: str = Field(
        description="the scheduler of the stream asked for, or the service's default one"
    )
    schedulers: dict[str, str] = Field(
        default_factory=dict,
        description="the scheduler that decides each listed task's stream (a stream's own, "
        "set by an administrator, or the default)",
    )
    tasks: list[TaskOut]


class SchedulerIn(Strict):
    spec: str = Field(
        min_length=1, max_length=200, description="name[:key=value,...], e.g. dpf-n:n=10"
    )


class SchedulerOut(BaseModel):
    stream: str
    scheduler: str
    pipeline_scheduler: str
