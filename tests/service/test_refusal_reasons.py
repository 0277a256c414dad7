"""``blockbudget_refusals_total{reason}``: every error the service answers 409 is counted by its
class name (subclasses included, e.g. an ingest's ``DuplicateRowsError``); nothing else is."""

from __future__ import annotations

import json

import pytest

from blockbudget import errors
from blockbudget.service.access import status_of
from blockbudget.service.metrics import _reason, refusal_reasons


def _body(error: object) -> bytes:
    return json.dumps({"error": error, "detail": "x"}).encode()


@pytest.mark.parametrize(
    "name",
    ["DuplicateRowsError", "IngestIdConflictError", "BudgetExceededError", "StoreConflictError"],
)
def test_a_409_is_counted_by_its_class(name: str) -> None:
    assert _reason(_body(name)) == name


@pytest.mark.parametrize(
    "body",
    [
        _body("InvalidRequestError"),  # a 422's class is no refusal reason
        _body("SomethingAClientMadeUp"),
        _body(["BudgetExceededError"]),
        b"not json",
        b"[1, 2]",
    ],
)
def test_anything_else_is_other(body: bytes) -> None:
    assert _reason(body) == "other"


def test_the_reasons_are_exactly_the_errors_answered_409() -> None:
    answered_409 = set()
    todo: list[type] = [errors.BlockBudgetError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ == "blockbudget.errors" and status_of(_instance(cls)) == 409:
            answered_409.add(cls.__name__)
    assert {"DuplicateRowsError", "IngestIdConflictError"} <= answered_409
    assert answered_409 == {
        name for name in refusal_reasons() if getattr(errors, name, None) is not None
    }


def _instance(cls: type) -> errors.BlockBudgetError:
    """An instance of ``cls`` without running its constructor (some take arguments)."""
    exc: errors.BlockBudgetError = cls.__new__(cls)
    return exc


def test_a_422_counts_only_as_a_budget_refusal() -> None:
    assert _reason(_body("NothingAffordableError"), 422) == "NothingAffordableError"
    assert _reason(_body("InvalidRequestError"), 422) is None
    assert _reason(b"not json", 422) is None
