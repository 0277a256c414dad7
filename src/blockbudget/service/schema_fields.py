"""The field types and base models that the HTTP API's bodies share (re-exported by
:mod:`blockbudget.service.schemas`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from blockbudget.budget import check_decimal_text
from blockbudget.errors import InvalidBudgetError
from blockbudget.service.params import CONTEXT_PATTERN

Name = Field(min_length=1, max_length=256)
#: A request's context; omitted (None), it is the principal's only bound context (else 422).
ContextName = Field(
    default=None,
    min_length=1,
    max_length=64,
    pattern=CONTEXT_PATTERN,
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
Epsilon = Field(
    gt=0,
    le=1e6,
    allow_inf_nan=False,
    description=(
        "ε per block, as the ledger charges it: on a user-level stream with rows_per_user = k, "
        "reservations and direct charges take the group cost (queries and tasks take the "
        "per-row ε and apply group privacy themselves)"
    ),
)
Delta = Field(
    default=0.0,
    ge=0,
    lt=1,
    allow_inf_nan=False,
    description="δ per block, as the ledger charges it (see ε)",
)
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


class Selection(Strict):
    """Which blocks: explicit ids/keys, or the newest ``last`` affordable ones."""

    blocks: list[str] | None = Field(default=None, min_length=1, max_length=10_000)
    last: int | None = Field(default=None, ge=1, le=100_000)
