"""What a principal learns beyond its rights: an owner managing readers learns only the right it
changed; an analyst learns no column it did not name, no attribute value of an attribute-blocked
stream, and not the key order of hidden blocks."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from blockbudget.service import Permission
from service.support import Seeded, owned_stream

Q = {"epsilon": 0.01, "context": "team-a"}


def test_an_owner_learns_only_the_right_it_changed(seeded: Seeded, client: TestClient) -> None:
    ho, hroot = seeded.headers(seeded.owner), seeded.headers(seeded.admin)
    seeded.keys.grant("bob", "secret", Permission.READ)  # bob's other right: not olga's business
    answers = {}
    for name in ("bob", "root", "nobody"):  # no right on flights / an admin / unknown
        r = client.delete(f"/v1/principals/{name}/streams/flights", headers=ho)
        assert r.status_code == 200, r.text
        assert r.json() == {"principal": name, "stream": "flights", "permission": None}
        answers[name] = r.json()["permission"]
    assert len(set(answers.values())) == 1  # unknown names answer like known ones
    r = client.put("/v1/principals/bob/streams/flights", json={"permission": "read"}, headers=ho)
    assert r.status_code == 200, r.text
    assert r.json() == {"principal": "bob", "stream": "flights", "permission": "read"}
    r = client.delete("/v1/principals/bob/streams/flights", headers=ho)
    assert r.json() == {"principal": "bob", "stream": "flights", "permission": None}
    assert seeded.keys.principal("bob").permission("secret") is Permission.READ
    # Admins keep full records and the 404 for an unknown principal.
    r = client.put("/v1/principals/bob/streams/flights", json={"permission": "read"}, headers=hroot)
    assert r.status_code == 200 and r.json()["streams"] == {"flights": "read", "secret": "read"}
    assert r.json()["role"] == "analyst"
    assert client.delete("/v1/principals/nobody/streams/flights", headers=hroot).status_code == 404


def test_an_analyst_is_not_told_a_streams_columns(seeded: Seeded, client: TestClient) -> None:
    body = {**Q, "last": 1, "column": "nope", "lower": 0, "upper": 1}
    columns = ("dep_delay", "carrier", "origin", "time")
    for kind in ("sum", "mean", "histogram"):
        r = client.post(
            f"/v1/streams/flights/queries/{kind}",
            headers=seeded.headers(seeded.analyst),
            json={**body, "categories": ["a"]} if kind == "histogram" else body,
        )
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == "unknown column 'nope'", r.text
        assert not [c for c in columns if c in r.text], r.text
    # The stream's owner (and an admin) still get the helpful list.
    seeded.keys.set_contexts("olga", ("team-a",))
    for who in (seeded.owner, seeded.admin):
        r = client.post("/v1/streams/flights/queries/sum", headers=seeded.headers(who), json=body)
        assert r.status_code == 422 and "dep_delay" in r.json()["detail"], r.text


def _attribute_stream(client: TestClient, seeded: Seeded) -> list[dict[str, Any]]:
    csv = "dx,v\nflu,1\nflu,2\ncold,4\nRAREDXMARKER,3\n"
    return owned_stream(client, seeded, "diag", by="attribute", column="dx", csv=csv)


def test_an_analyst_sees_opaque_ids_on_an_attribute_stream(
    seeded: Seeded, client: TestClient
) -> None:
    real = _attribute_stream(client, seeded)
    assert sorted(b["key"] for b in real) == ["RAREDXMARKER", "cold", "flu"]  # the owner's view
    ha = seeded.headers(seeded.analyst)
    texts: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        r = client.request(method, path, headers=ha, **kw)
        texts.append(r.text)
        return r

    ids = [b["block_id"] for b in call("GET", "/v1/streams/diag/blocks").json()]
    assert len(ids) == 3 and all(re.fullmatch(r"diag/b[0-9a-f]{24}", b) for b in ids), ids
    r = call("POST", "/v1/streams/diag/queries/count", json={**Q, "blocks": [ids[0]]})
    assert r.status_code == 200 and r.json()["blocks"] == [ids[0]], r.text
    for name in ("RAREDXMARKER", "diag/RAREDXMARKER", "nosuchvalue"):  # keys are not names
        r = call("POST", "/v1/streams/diag/queries/count", json={**Q, "blocks": [name]})
        assert r.status_code == 404, r.text
    r = call("POST", "/v1/streams/diag/queries/count", json={**Q, "blocks": [ids[0], ids[0]]})
    assert r.status_code == 422, r.text  # the ledger names the duplicate block: redacted
    r = call("POST", "/v1/streams/diag/queries/count", json={**Q, "epsilon": 9.0, "last": 1})
    assert r.status_code in (409, 422), r.text
    r = call("POST", "/v1/streams/diag/tasks", json={**Q, "epsilon": 9.0, "last": 3})
    assert r.status_code == 422, r.text  # more than any block holds
    r = call("POST", "/v1/streams/diag/tasks", json={**Q, "epsilon": 0.5, "selector": {"any": {}}})
    assert r.status_code == 201, r.text  # waits (DPF): its why and note name opaque ids only
    call("GET", f"/v1/tasks/{r.json()['id']}")
    call("GET", "/v1/tasks")
    call("GET", "/v1/dashboard?stream=diag")
    leaked = [t for t in texts for k in ("RAREDXMARKER", "flu", "cold") if k in t]
    assert not leaked, leaked


def test_hidden_blocks_are_listed_in_opaque_id_order(seeded: Seeded, client: TestClient) -> None:
    ho, ha = seeded.headers(seeded.owner), seeded.headers(seeded.analyst)
    users = [17 + 1000 * k for k in range(8)]  # eight id ranges: a key-ordered list is 1 of 8!
    csv = "uid,spend\n" + "".join(f"{u},1.5\n" for u in users)
    owned_stream(client, seeded, "users", by="user", column="uid", csv=csv)
    listed = [b["block_id"] for b in client.get("/v1/streams/users/blocks", headers=ha).json()]
    assert len(listed) == 8 and listed == sorted(listed)
    r = client.post("/v1/streams/users/queries/count", headers=ha, json={**Q, "last": 8})
    assert r.status_code == 200 and r.json()["blocks"] == listed, r.text
    r = client.post("/v1/streams/users/reservations", headers=ha, json={**Q, "last": 8})
    assert r.status_code == 201 and r.json()["blocks"] == listed, r.text
    r = client.post("/v1/streams/users/tasks", headers=ha, json={**Q, "last": 8})
    assert r.status_code == 201 and r.json()["blocks"] == listed, r.text
    significance = {b: 1.0 + k for k, b in enumerate(reversed(listed))}
    r = client.post(
        "/v1/streams/users/tasks",
        headers=ha,
        json={**Q, "blocks": list(reversed(listed)), "significance": significance},
    )
    assert r.status_code == 201 and list(r.json()["significance"]) == listed, r.text
    dash = client.get("/v1/dashboard?stream=users", headers=ha).json()
    assert [b["block_id"] for b in dash["blocks"]] == listed
    assert dash["heatmap"]["blocks"] == listed
    # The owner keeps the key order.
    own = [b["key"] for b in client.get("/v1/streams/users/blocks", headers=ho).json()]
    assert own == sorted(own, key=lambda k: int(k[1:].split("-")[0]))
