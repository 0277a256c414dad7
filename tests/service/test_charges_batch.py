"""The batch charge route: independent charges, each all-or-nothing, one result each; a failed
access check refuses the whole batch with nothing charged; replays charge once."""

from __future__ import annotations

from decimal import Decimal

from fastapi.testclient import TestClient

from blockbudget.budget import UNIT
from service.support import Seeded, ledger_snapshot


def charged(seeded: Seeded, context: str = "team-a") -> dict[str, Decimal]:
    return {
        s.block: Decimal(s.charged[0]) / UNIT
        for s in seeded.platform.ledger.states("flights", context)
    }


def test_batch_charges_each_item_on_its_own(seeded: Seeded, client: TestClient) -> None:
    a, b = sorted(charged(seeded))[:2]
    h = seeded.headers(seeded.analyst)
    items = [
        {"blocks": [a], "epsilon": 0.4, "context": "team-a", "request_id": "x1"},
        {"blocks": [a, b], "epsilon": 0.5, "context": "team-a", "request_id": "x2"},
        {"blocks": [a, b], "epsilon": 0.2, "context": "team-a", "request_id": "x3"},
        {"blocks": [a], "epsilon": 0.4, "context": "team-a", "request_id": "x1"},  # replay
    ]
    r = client.post("/v1/streams/flights/charges/batch", headers=h, json={"charges": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    ok = [res["ok"] for res in results]
    # x1 and its replay always succeed; of x2 (0.5) and x3 (0.2) on top of 0.4 on block a,
    # exactly those that fit in arrival order of the commit succeed: never both 0.5 and 0.2+…
    assert ok[0] and ok[3] and results[3]["charge"] == results[0]["charge"]
    spent = charged(seeded)
    expect_a = Decimal("0.4") + sum(
        (Decimal(str(items[k]["epsilon"])) for k in (1, 2) if ok[k]), Decimal(0)
    )
    assert spent[a] == expect_a <= 1
    assert spent[b] == sum((Decimal(str(items[k]["epsilon"])) for k in (1, 2) if ok[k]), Decimal(0))
    for k in (1, 2):
        if not ok[k]:
            assert results[k]["status"] == 409 and results[k]["error"] == "BudgetExceededError"
    assert any(ok[1:3]) and not all(ok[1:3])  # 0.4 + 0.5 or 0.4 + 0.2 fit, not all three


def test_a_batch_failing_a_check_charges_nothing(seeded: Seeded, client: TestClient) -> None:
    a = sorted(charged(seeded))[0]
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    good = {"blocks": [a], "epsilon": 0.1, "context": "team-a"}
    for bad in (
        {"blocks": [a], "epsilon": 0.1, "context": "team-b"},  # not its context
        {"blocks": ["secret/2013-01-10"], "epsilon": 0.1, "context": "team-a"},  # other stream
    ):
        r = client.post(
            "/v1/streams/flights/charges/batch", headers=h, json={"charges": [good, bad]}
        )
        assert r.status_code == 403, r.text
    r = client.post("/v1/streams/secret/charges/batch", headers=h, json={"charges": [good]})
    assert r.status_code == 403
    r = client.post("/v1/streams/flights/charges/batch", headers=h, json={"charges": []})
    assert r.status_code == 422
    assert ledger_snapshot(seeded.platform) == before
