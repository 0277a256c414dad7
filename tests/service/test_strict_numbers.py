"""JSON numbers are numbers and booleans are booleans: ``false`` is no count of seconds, ``1``
no flag and ``"5"`` no count (pydantic's lax mode reads all three); budgets still take exact
decimal text, and NumPy scalars built in Python still mean the number they hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError

from blockbudget.service import schemas as sc
from blockbudget.service.admin_schemas import RotateIn
from blockbudget.service.stream_releases import RecommendIn
from service.support import Seeded

STREAM = {"name": "s", "epsilon": 1}
RECOMMEND = {"domain_size": 4, "min_users": 1, "epsilon": 1}


@pytest.mark.parametrize(
    "model, body",
    [
        (RotateIn, {"grace_seconds": False}),
        (RotateIn, {"grace_seconds": "5"}),
        (sc.StreamIn, {**STREAM, "epsilon": True}),
        (sc.StreamIn, {**STREAM, "window_seconds": True}),
        (sc.StreamIn, {**STREAM, "window_seconds": "60"}),
        (sc.ReserveIn, {"epsilon": 0.1, "last": True}),
        (sc.ReserveIn, {"epsilon": 0.1, "last": 1, "ttl_seconds": False}),
        (sc.TaskIn, {"epsilon": False, "last": 1}),
        (sc.TaskIn, {"epsilon": "0.1", "last": 1, "timeout_seconds": True}),
        (sc.TaskIn, {"kind": "budget", "rdp": [True], "last": 1}),
        (RecommendIn, {**RECOMMEND, "warmup": 1}),
        (RecommendIn, {**RECOMMEND, "warmup": "yes"}),
    ],
)
def test_a_boolean_is_no_number_and_a_number_no_boolean(
    model: type[BaseModel], body: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(body)


@pytest.mark.parametrize(
    "model, body, field, value",
    [
        (RotateIn, {"grace_seconds": 5}, "grace_seconds", 5.0),
        (sc.StreamIn, {**STREAM, "epsilon": "0.5"}, "epsilon", 0.5),
        (sc.StreamIn, {**STREAM, "window_seconds": 60.0}, "window_seconds", 60),
        (sc.ReserveIn, {"epsilon": np.float32(0.5), "last": np.int64(2)}, "last", 2),
        (RecommendIn, {**RECOMMEND, "warmup": np.bool_(False)}, "warmup", False),
    ],
)
def test_numbers_decimal_text_and_numpy_scalars_still_pass(
    model: type[BaseModel], body: dict[str, Any], field: str, value: object
) -> None:
    got = getattr(model.model_validate(body), field)
    assert got == value and type(got) is type(value)


def test_a_key_rotation_with_a_boolean_grace_is_refused_and_changes_nothing(
    client: TestClient, seeded: Seeded
) -> None:
    key_id = seeded.analyst.split("_")[1]
    path = f"/v1/principals/ana/keys/{key_id}/rotate"
    r = client.post(path, headers=seeded.headers(seeded.admin), json={"grace_seconds": False})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "RequestValidationError"
    assert client.get("/v1/whoami", headers=seeded.headers(seeded.analyst)).status_code == 200
