"""Budgets on the wire are exact decimal strings: a 409 never shows the ledger's fixed-point
integers, a refusal carries the remaining budget and the shortfall, ``remaining`` in the blocks
answer is structured; and ``/v1/streams/{s}/afford`` answers exactly."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from blockbudget.budget import Budget
from blockbudget.service import create_app

from .support import seed

#: A run of 12 or more digits: a fixed-point amount (1 unit = 1e-18) leaking into a message.
FIXED_POINT = re.compile(r"\d{12,}")
#: Quoted names (reservation ids are random hex) are not budgets: drop them before looking.
QUOTED = re.compile(r"'[^']*'")


def test_overdraws_and_refusals_show_decimals(tmp_path: Path) -> None:
    seeded = seed(tmp_path / "h")
    p = seeded.platform
    blocks = [m.block_id for m in p.store.blocks("flights")]
    with TestClient(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as client:
        h = seeded.headers(seeded.analyst)
        r = client.post(
            "/v1/streams/flights/reservations",
            headers=h,
            json={"epsilon": 0.5, "blocks": blocks[:2]},
        )
        rid = r.json()["id"]
        r = client.post(f"/v1/reservations/{rid}/charges", headers=h, json={"epsilon": 0.2})
        assert r.status_code == 200
        over = client.post(f"/v1/reservations/{rid}/charges", headers=h, json={"epsilon": 0.4})
        assert over.status_code == 409 and over.json()["error"] == "ReservationError"
        detail = over.json()["detail"]
        assert not FIXED_POINT.search(QUOTED.sub("''", detail)), detail
        assert "holds ε=0.3, δ=0, short by ε=0.1, δ=0" in detail
        # A budget refusal (Sage Thm 4.3: 0.5 reserved + 0.6 > 1) names exact decimals, and
        # its body carries them structured.
        r = client.post(
            "/v1/streams/flights/reservations",
            headers=h,
            json={"epsilon": 0.6, "blocks": blocks[:1]},
        )
        assert r.status_code == 409 and r.json()["error"] == "BudgetExceededError"
        body = r.json()
        assert not FIXED_POINT.search(QUOTED.sub("''", body["detail"]))
        assert body["refusal"] == {
            "context": "team-a",
            "refusing_blocks": 1,
            "blocks": [
                {
                    "remaining": {"epsilon": "0.5", "delta": "0.000001"},
                    "shortfall": {"epsilon": "0.1", "delta": "0"},
                }
            ],
        }
        # --last found nothing: 422 with the newest live block's remaining and shortfall.
        p.ledger.charge(blocks, Budget(epsilon="0.4"), context="team-a")
        r = client.post(
            "/v1/streams/flights/query",
            headers=h,
            json={"query": {"statistic": "count", "epsilon": 0.7}, "last": 2},
        )
        assert r.status_code == 422 and r.json()["error"] == "NothingAffordableError"
        assert r.json()["refusal"]["blocks"] == [
            {
                "remaining": {"epsilon": "0.6", "delta": "0.000001"},
                "shortfall": {"epsilon": "0.1", "delta": "0"},
            }
        ]
        # remaining in the blocks answer: exact and structured; the display text separate
        views = {
            b["block_id"]: b for b in client.get("/v1/streams/flights/blocks", headers=h).json()
        }
        assert views[blocks[0]]["remaining"]["team-a"] == {"epsilon": "0.1", "delta": "0.000001"}
        assert views[blocks[0]]["remaining_display"]["team-a"] == "(ε=0.1, δ=1e-06)"


def test_afford_route(tmp_path: Path) -> None:
    seeded = seed(tmp_path / "h")
    p = seeded.platform
    blocks = [m.block_id for m in p.store.blocks("flights")]
    p.ledger.charge([blocks[1]], Budget(epsilon="0.375"), context="team-a")
    with TestClient(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as client:
        h = seeded.headers(seeded.analyst)
        got = client.get("/v1/streams/flights/afford", headers=h, params={"last": 4})
        assert got.status_code == 200, got.text
        doc = got.json()
        assert doc["context"] == "team-a" and doc["epsilon"] == "0.625"  # 1 − 0.375
        assert doc["binding"] == [blocks[1]] and doc["blocks"] == blocks[-4:]
        posted = client.post(
            "/v1/streams/flights/afford",
            headers=h,
            json={"blocks": [blocks[0]], "delta": "0.000001"},
        )
        assert posted.status_code == 200 and posted.json()["epsilon"] == "1"
        assert (
            client.post(
                "/v1/streams/flights/afford", headers=h, json={"last": 1, "delta": "0.000002"}
            ).json()["epsilon"]
            is None
        )
        # exactly the afforded ε reserves; a unit more does not
        more = client.post(
            "/v1/streams/flights/reservations",
            headers=h,
            json={"epsilon": 0.625000000000001, "blocks": blocks[1:2]},
        )
        assert more.status_code == 409
        ok = client.post(
            "/v1/streams/flights/reservations",
            headers=h,
            json={"epsilon": 0.625, "blocks": blocks[1:2]},
        )
        assert ok.status_code == 201
        assert (
            client.get("/v1/streams/secret/afford", headers=h, params={"last": 1}).status_code
            == 403
        )
        bad = client.get(
            "/v1/streams/flights/afford", headers=h, params={"last": 1, "context": "team-b"}
        )
        assert bad.status_code == 403
        both = client.post("/v1/streams/flights/afford", headers=h, json={})
        assert both.status_code == 422


def test_budget_text_is_ascii_decimal_only(tmp_path: Path) -> None:
    from blockbudget.query import Query, to_dict

    from .support import ledger_snapshot

    seeded = seed(tmp_path / "h")
    p = seeded.platform
    block = p.store.blocks("flights")[0].block_id
    query = to_dict(Query.count(epsilon=0.05))
    with TestClient(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as client:
        h = seeded.headers(seeded.analyst)
        before = ledger_snapshot(p)

        def bodies(text: str) -> list[tuple[str, dict[str, object]]]:
            return [
                ("charges", {"blocks": [block], "epsilon": text, "context": "team-a"}),
                ("query", {"query": {**query, "epsilon": text}, "context": "team-a", "last": 1}),
                ("tasks", {"kind": "budget", "epsilon": text, "selector": {"newest": 1}}),
                ("afford", {"last": 1, "context": "team-a", "delta": text}),
            ]

        for text in ("１", "\u0661", " 1", "1\n", "1_0", "0x1", "7" * 100_000):
            for route, body in bodies(text):
                r = client.post(f"/v1/streams/flights/{route}", headers=h, json=body)
                assert r.status_code == 422, (route, text[:9], r.text[:300])
                assert len(r.text) < 600, (route, r.text[:300])
        assert ledger_snapshot(p) == before
        for route, body in bodies("1e-3")[:2]:  # the ASCII forms still charge
            r = client.post(f"/v1/streams/flights/{route}", headers=h, json=body)
            assert r.status_code == 200, (route, r.text)
