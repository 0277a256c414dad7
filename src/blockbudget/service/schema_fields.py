"""The field types and base models that the HTTP API's bodies share (re-exported by
:mod:`blockbudget.service.schemas`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from blockbudget.budget import check_decimal_text
from blockbudget.decimals import MIN_MAGNITUDE, plain_number
from blockbudget.errors import InvalidBudgetError
from blockbudget.service.params import CONTEXT_PATTERN

Name = Field(min_length=1, max_length=256)
#: The smallest positive budget value the ledger takes (:data:`blockbudget.decimals.MIN_MAGNITUDE`).
MIN_BUDGET = float(MIN_MAGNITUDE)
#: The OpenAPI form of the ledger's rule that a budget value is 0 or at least MIN_BUDGET (for
#: fields whose minimum is 0: a positive number below it is refused).
NOT_TINY: dict[str, Any] = {
    "not": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": MIN_BUDGET}
}
#: A request's context; omitted (None), it is the principal's only bound context (else 422).
ContextName = Field(
    default=None,
    min_length=1,
    max_length=64,
    pattern=CONTEXT_PATTERN,
    description="context that pays (default: the caller's only bound context)",
)


def not_tiny(value: float) -> float:
    """Refuse a positive value below :data:`MIN_BUDGET`, as the ledger does (for a field that
    is not read by the ledger, e.g. a forecast's δ); the schema says it with :data:`NOT_TINY`."""
    if 0 < value < MIN_BUDGET:
        raise ValueError(f"must be 0 or at least {MIN_BUDGET}, got {value!r}")
    return value


def _json_number(value: object) -> object:
    """A number must be a number: a boolean or a string is refused (pydantic alone reads
    ``false`` as 0 and ``"5"`` as 5); a NumPy scalar is the Python number it holds."""
    value = plain_number(value)
    if isinstance(value, bool | str):
        raise ValueError(f"a number is required, not {type(value).__name__}")
    return value


def _json_bool(value: object) -> object:
    """A boolean must be a boolean: a number or a string is refused (pydantic alone reads ``1``
    or ``"yes"`` as true); a NumPy boolean is the bool it holds."""
    value = plain_number(value)
    if not isinstance(value, bool):
        raise ValueError(f"a boolean is required, not {type(value).__name__}")
    return value


#: A JSON number read as a float: an integer or a float, never a boolean or a string.
Number = Annotated[float, BeforeValidator(_json_number)]
#: A JSON integer (``60.0`` too, as JSON Schema has it): never a boolean, a fraction or a string.
Count = Annotated[int, BeforeValidator(_json_number)]
#: A JSON boolean: never a number or a string.
Flag = Annotated[bool, BeforeValidator(_json_bool)]


def _decimal_text(value: object) -> object:
    """A budget sent as text must be exact ASCII decimal text (pydantic alone would read
    ``" 1"`` or ``"1_0"``); a boolean is no budget (pydantic alone would read ``false`` as 0);
    numbers pass unchanged."""
    value = plain_number(value)
    if isinstance(value, bool):
        raise ValueError("a budget is a number or decimal text, not a boolean")
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


#: The form of a budget sent as text, as an OpenAPI pattern: ASCII digits, an optional sign,
#: point and exponent (:data:`blockbudget.decimals.DECIMAL_TEXT` without the infinities no
#: budget field takes). The range of the number it holds is checked once it is read.
DECIMAL_PATTERN = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"


#: A budget as decimal text (its range is checked once it is read).
DecimalText = Annotated[str, Field(pattern=DECIMAL_PATTERN)]


class _TextForm:
    """Says in a budget's schema that it may come as decimal text: the :data:`DECIMAL_PATTERN`
    alternative beside the number (pydantic's schema of a float says "number" only; that of a
    Decimal has a bare string alternative, which gets the pattern)."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        text = {"type": "string", "pattern": DECIMAL_PATTERN}
        strings = [b for b in schema.get("anyOf", []) if b.get("type") == "string"]
        if not strings:
            return {"anyOf": [schema, text]}
        for branch in strings:
            branch.update(text)
        return schema


#: ε or δ as a float: a JSON number, or ASCII decimal text.
BudgetFloat = Annotated[float, BeforeValidator(_decimal_text), _TextForm()]
#: ε or δ read exactly: a JSON number, or ASCII decimal text.
BudgetDecimal = Annotated[Decimal, BeforeValidator(_decimal_text), _TextForm()]
Epsilon = Field(
    ge=MIN_BUDGET,
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
    json_schema_extra=NOT_TINY,
    ge=0,
    lt=1,
    allow_inf_nan=False,
    description="δ per block, as the ledger charges it (see ε)",
)
RequestId = Field(default=None, min_length=1, max_length=200, description="idempotency key")


#: A block's id or key, as a request names it (never empty).
BlockName = Annotated[str, Field(min_length=1, max_length=1000)]


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

    blocks: list[BlockName] | None = Field(default=None, min_length=1, max_length=10_000)
    last: Count | None = Field(default=None, ge=1, le=100_000)
