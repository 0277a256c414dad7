"""Over HTTP, a user stream's DP maximum id (Sage §4.4): admins release it; afterwards an
analyst can neither list, count, select nor name a block beyond it, and every answer it gets
carries opaque ids or released values only."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from service.support import Seeded, owned_stream

#: Users 0..2499 (incrementing ids): blocks 0-999, 1000-1999 full, 2000-2999 a quarter full.
CSV = "uid,spend\n" + "".join(f"{u},{u % 5}\n" for u in range(2500))
HIDDEN = "u002000-002999"


def test_an_analyst_cannot_learn_an_unreleased_range(seeded: Seeded, client: TestClient) -> None:
    real = owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV)
    assert [b["key"] for b in real] == ["u000000-000999", "u001000-001999", HIDDEN]
    ha, hadmin = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    texts: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        r = client.request(method, path, headers=ha, **kw)
        texts.append(r.text)
        return r

    before = call("GET", "/v1/streams/users/blocks").json()
    assert len(before) == 3  # no release yet: the stream is not gated
    hidden_id = next(b for b in real if b["key"] == HIDDEN)["block_id"]
    # Only admins release; an analyst's attempt is refused and charges nothing.
    body = {"context": "team-a", "epsilon": 0.5, "beta": 0.05}
    assert call("POST", "/v1/streams/users/max-id", json=body).status_code == 403
    r = client.post("/v1/streams/users/max-id", headers=hadmin, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    # 2500 ids ± Laplace(2), less a margin ln(10)/0.5 ≈ 4.6: the partial block stays hidden
    # unless the noise exceeds ~495 (probability e^-247).
    assert 1999 <= out["safe_max"] < 2999 and out["secure_noise"] is True, out
    assert call("GET", "/v1/streams/users/max-id").json() == out  # public, free to read
    # Listing, counting and selecting see the two known blocks only.
    shown = call("GET", "/v1/streams/users/blocks").json()
    assert len(shown) == 2
    assert all(re.fullmatch(r"users/b[0-9a-f]{24}", b["block_id"]) for b in shown)
    board = call("GET", "/v1/dashboard", params={"stream": "users"}).json()
    assert {b["block_id"] for b in board["blocks"]} == {b["block_id"] for b in shown}
    streams = {s["name"]: s for s in call("GET", "/v1/streams").json()}
    assert streams["users"]["blocks"] == 2
    q = {"epsilon": 0.01, "context": "team-a"}
    r = call("POST", "/v1/streams/users/queries/count", json={**q, "last": 3})
    assert r.status_code == 200 and len(r.json()["blocks"]) == 2, r.text
    assert {*r.json()["blocks"]} == {b["block_id"] for b in shown}
    # The hidden block's opaque id (seen before the release) is refused exactly like a made-up
    # one, and never with its key.
    opaque_hidden = next(b["block_id"] for b in before if b["block_id"] not in r.json()["blocks"])
    made_up = "users/b" + "0" * 24
    refusals = []
    for name in (opaque_hidden, made_up):
        r = call("POST", "/v1/streams/users/queries/count", json={**q, "blocks": [name]})
        assert r.status_code == 404, r.text
        refusals.append(r.text.replace(name, "NAME"))
    assert refusals[0] == refusals[1]
    # The owner (and admins) still see every key; no analyst answer names any real range.
    owner = client.get("/v1/streams/users/blocks", headers=seeded.headers(seeded.owner)).json()
    assert len(owner) == 3 and hidden_id.endswith(HIDDEN)
    assert not any(re.search(r"u\d{6,}-\d{6,}", t) for t in texts), texts
