"""Over HTTP, a user stream's DP maximum id (Sage §4.4). A user stream is gated from its
creation: before the first release an analyst sees no block, counts none and can select none
(the refusal names the command that releases the maximum id), and nobody can select one; an
admin or an owner releases it; afterwards an analyst can neither list, count, select nor name a
block beyond it, and every answer it gets carries opaque ids or released values only. Owners
and admins see every block with its real key throughout."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from blockbudget.service.blocknames import BlockNames
from service.support import Seeded, owned_stream

#: Users 0..2499 (incrementing ids): blocks 0-999, 1000-1999 full, 2000-2999 a quarter full.
CSV = "uid,spend\n" + "".join(f"{u},{u % 5}\n" for u in range(2500))
HIDDEN = "u002000-002999"
RANGE = re.compile(r"u\d{6,}-\d{6,}")
Q = {"epsilon": 0.01, "context": "team-a"}
#: What must be the same in two refusals for them to tell nothing apart (the body aside).
SAME_HEADERS = ("content-type", "content-length", "www-authenticate")


def _refusal(r: Any, name: str) -> tuple[int, str, dict[str, str | None]]:
    return r.status_code, r.text.replace(name, "NAME"), {h: r.headers.get(h) for h in SAME_HEADERS}


def test_a_fresh_user_stream_shows_an_analyst_nothing_and_refuses_every_selection(
    seeded: Seeded, client: TestClient
) -> None:
    real = owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV, ids_known=False)
    assert [b["key"] for b in real] == ["u000000-000999", "u001000-001999", HIDDEN]
    ha, ho = seeded.headers(seeded.analyst), seeded.headers(seeded.owner)
    texts: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        r = client.request(method, path, headers=ha, **kw)
        texts.append(r.text)
        return r

    # Listing, counting, the dashboard: nothing (the raw count is 3).
    assert call("GET", "/v1/streams/users/blocks").json() == []
    assert call("GET", "/v1/streams/users").json()["blocks"] == 0
    assert {s["name"]: s["blocks"] for s in call("GET", "/v1/streams").json()}["users"] == 0
    board = call("GET", "/v1/dashboard", params={"stream": "users"}).json()
    assert board["blocks"] == [] and board["heatmap"]["blocks"] == []
    assert board["retiring"] == {"team-a": []} and board["retiring_everywhere"] is None
    assert call("GET", "/v1/streams/users/max-id").status_code == 422  # no release yet
    # Every selection is refused with the command to run; naming a real block's opaque id or
    # a made-up one gives the very same answer (the name is not even echoed).
    real_id = BlockNames(seeded.platform, seeded.platform.ledger.engine).opaque("users/" + HIDDEN)
    made_up = "users/b" + "0" * 24
    tries = [
        ("POST", "/v1/streams/users/queries/count", {**Q, "last": 1}),
        ("POST", "/v1/streams/users/reservations", {**Q, "last": 1}),
        ("POST", "/v1/streams/users/tasks", {**Q, "last": 1}),
        ("POST", "/v1/streams/users/tasks", {**Q, "selector": {"any": {}}}),
    ]
    bodies = set()
    for method, path, body in tries:
        r = call(method, path, json=body)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "UnreleasedIdsError", r.text
        assert "blockbudget stream max-id users" in r.json()["detail"], r.text
        assert "POST /v1/streams/users/max-id" in r.json()["detail"], r.text
    for name in (real_id, made_up):
        for path in ("queries/count", "reservations", "tasks"):
            r = call("POST", f"/v1/streams/users/{path}", json={**Q, "blocks": [name]})
            assert r.status_code == 422 and "stream max-id users" in r.text, r.text
            bodies.add((r.text, *(r.headers.get(h) for h in SAME_HEADERS)))
        r = call("POST", "/v1/streams/users/charges", json={**Q, "blocks": [name]})
        assert r.status_code == 422 and "stream max-id users" in r.text, r.text
    assert len(bodies) == 1  # one answer, byte for byte, whichever route and name
    assert call("GET", "/v1/tasks").json()["tasks"] == []  # nothing was queued
    # The owner (and admins) see every block and its key, but cannot select one either.
    assert client.get("/v1/streams/users", headers=ho).json()["blocks"] == 3
    admin = client.get("/v1/streams/users/blocks", headers=seeded.headers(seeded.admin)).json()
    assert [b["key"] for b in admin] == [b["key"] for b in real]
    r = client.post(
        "/v1/streams/users/queries/count",
        headers=seeded.headers(seeded.admin),
        json={**Q, "blocks": [HIDDEN]},
    )
    assert r.status_code == 422 and r.json()["error"] == "UnreleasedIdsError", r.text
    # Nothing was charged by any refusal.
    assert all(not any(s.charged) for s in seeded.platform.ledger.states(stream="users"))
    assert not any(RANGE.search(t) for t in texts), texts


def test_an_analyst_cannot_learn_an_unreleased_range(seeded: Seeded, client: TestClient) -> None:
    real = owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV, ids_known=False)
    ha, ho = seeded.headers(seeded.analyst), seeded.headers(seeded.owner)
    texts: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        r = client.request(method, path, headers=ha, **kw)
        texts.append(r.text)
        return r

    # Analysts cannot release; an owner must be able to spend in the context it charges.
    body = {"context": "team-a", "epsilon": 0.5, "beta": 0.05}
    assert call("POST", "/v1/streams/users/max-id", json=body).status_code == 403
    assert client.post("/v1/streams/users/max-id", headers=ho, json=body).status_code == 403
    assert all(not any(s.charged) for s in seeded.platform.ledger.states(stream="users"))
    seeded.keys.set_contexts("olga", ("team-a",))
    r = client.post("/v1/streams/users/max-id", headers=ho, json=body)
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
    assert all(b["key"] == b["block_id"].partition("/")[2] and b["rows"] is None for b in shown)
    board = call("GET", "/v1/dashboard", params={"stream": "users"}).json()
    assert {b["block_id"] for b in board["blocks"]} == {b["block_id"] for b in shown}
    streams = {s["name"]: s for s in call("GET", "/v1/streams").json()}
    assert streams["users"]["blocks"] == 2
    r = call("POST", "/v1/streams/users/queries/count", json={**Q, "last": 3})
    assert r.status_code == 200 and len(r.json()["blocks"]) == 2, r.text
    assert {*r.json()["blocks"]} == {b["block_id"] for b in shown}
    # A task over at least 3 blocks explains itself with the known blocks only, and is not
    # bound to (nor granted on) the 2 known ones: it waits for more blocks.
    r = call(
        "POST", "/v1/streams/users/tasks", json={**Q, "selector": {"any": {"k": 3, "min_k": 3}}}
    )
    assert r.status_code == 201 and r.json()["state"] == "waiting", r.text
    task = call("GET", f"/v1/tasks/{r.json()['id']}").json()
    assert task["state"] == "waiting" and not task.get("blocks"), task
    why = task["why"]
    assert "of the 2 block(s)" in why["reason"], why
    assert "it needs 3 and 2 live one(s) exist: it waits for more blocks" in why["reason"], why
    # The hidden block's opaque id is refused exactly like a made-up one of the same shape.
    hidden = BlockNames(seeded.platform, seeded.platform.ledger.engine).opaque("users/" + HIDDEN)
    assert hidden not in {b["block_id"] for b in shown}
    made_up = "users/b" + "0" * 24
    for path in ("queries/count", "reservations", "tasks"):
        refusals = []
        for name in (hidden, made_up):
            r = call("POST", f"/v1/streams/users/{path}", json={**Q, "blocks": [name]})
            assert r.status_code == 404, r.text
            refusals.append(_refusal(r, name))
        assert refusals[0] == refusals[1], refusals
    # The owner and admins still see every key; no analyst answer names any real range.
    for who in (seeded.owner, seeded.admin):
        keys = [
            b["key"]
            for b in client.get("/v1/streams/users/blocks", headers=seeded.headers(who)).json()
        ]
        assert keys == [b["key"] for b in real]
    assert not any(RANGE.search(t) for t in texts), texts


def test_the_remote_cli_shows_an_analyst_the_gate_and_its_command(seeded: Seeded) -> None:
    from typer.testing import CliRunner

    from blockbudget.cli import app as cli
    from blockbudget.service import create_app
    from service.support import thread_server

    runner = CliRunner()
    app_ = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with TestClient(app_) as client:
        owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV, ids_known=False)
    with thread_server(app_) as url:

        def as_(key: str, *args: str) -> str:
            r = runner.invoke(cli, [*args, "--server", url, "--api-key", key])
            return f"{r.exit_code} " + " ".join(r.output.split())  # rich wraps lines

        query = [
            "query",
            "count",
            "users",
            "--epsilon",
            "0.1",
            "--context",
            "team-a",
            "--last",
            "1",
        ]
        listed = as_(seeded.analyst, "stream", "list")
        assert re.search(r"│ users │[^│]*│[^│]*│ user\(uid\) │ 0 │", listed), listed
        out = as_(seeded.analyst, *query)
        assert out.startswith("2 ") and "blockbudget stream max-id users --context" in out, out
        assert not RANGE.search(out) and "u000000" not in as_(seeded.analyst, "blocks", "users")
        out = as_(
            seeded.admin, "stream", "max-id", "users", "--epsilon", "0.5", "--context", "team-a"
        )
        assert out.startswith("0 ") and "released maximum id" in out, out
        out = as_(seeded.analyst, *query, "--json")
        assert out.startswith("0 ") and re.search(
            r'"blocks": \[\s*"users/b[0-9a-f]{24}"\s*\]', out
        ), out


def test_a_last_refusal_does_not_count_the_unreleased_blocks(
    seeded: Seeded, client: TestClient
) -> None:
    """A ``last`` selection nothing affords is refused with what the newest *known* block has
    left, however many unreleased blocks sit above it (63 and 64 here: the refusal once read
    one page of 64 ids only)."""
    from userids_support import ShiftNoise

    from blockbudget.userids import release_max_id

    answers = []
    for hidden in (63, 64):
        name = f"users{hidden}"
        users = [5, 1500] + [10_000 + 1000 * i for i in range(hidden)]
        csv = "uid,spend\n" + "".join(f"{u},1\n" for u in users)
        owned_stream(client, seeded, name, by="user", column="uid", csv=csv, ids_known=False)
        ctx = f"ids-{name}"
        seeded.platform.add_context(ctx)  # 2 known users (blocks 0-999, 1000-1999) + shift
        release = release_max_id(
            seeded.platform, name, context=ctx, epsilon=0.5, noise=ShiftNoise(2000.0 - hidden)
        )
        seeded.platform.ledger.close_context(ctx)
        assert release.safe_max < 10_000
        body = {"context": "team-a", "epsilon": 5, "last": 1}
        r = client.post(
            f"/v1/streams/{name}/queries/count", headers=seeded.headers(seeded.analyst), json=body
        )
        assert r.status_code == 422, r.text
        answers.append((r.json()["refusal"], r.json()["detail"].replace(name, "S")))
    assert answers[0] == answers[1]
    (block,) = answers[0][0]["blocks"]
    assert block == {
        "remaining": {"epsilon": "1", "delta": "0.000001"},
        "shortfall": {"epsilon": "4", "delta": "0"},
    }


def test_direct_charges_keep_the_gate_for_owners_and_admins(
    seeded: Seeded, client: TestClient
) -> None:
    owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV, ids_known=False)
    seeded.keys.set_contexts("olga", ("team-a",))
    ho, hr = seeded.headers(seeded.owner), seeded.headers(seeded.admin)
    one = {"context": "team-a", "epsilon": 0.01, "blocks": ["users/u000000-000999"]}
    for h in (ho, hr):  # no release yet: every charge is refused as a selection is
        for path, body in (("charges", one), ("charges/batch", {"charges": [one]})):
            r = client.post(f"/v1/streams/users/{path}", headers=h, json=body)
            assert (r.status_code, r.json()["error"]) == (422, "UnreleasedIdsError"), r.text
    r = client.post(
        "/v1/streams/users/max-id", headers=ho, json={**Q, "beta": 0.05, "epsilon": 0.5}
    )
    assert r.status_code == 200 and r.json()["safe_max"] < 2999, r.text
    hidden = {**one, "blocks": ["users/" + HIDDEN]}
    before = seeded.platform.ledger.state("users/" + HIDDEN, "team-a").charged  # the release's
    for h in (ho, hr):  # beyond the released bound: the 404 of an unknown block
        for path, body in (("charges", hidden), ("charges/batch", {"charges": [hidden]})):
            r = client.post(f"/v1/streams/users/{path}", headers=h, json=body)
            assert r.status_code == 404, r.text
            assert r.json()["detail"] == f"stream 'users' has no block 'users/{HIDDEN}'"
    assert seeded.platform.ledger.state("users/" + HIDDEN, "team-a").charged == before
    r = client.post("/v1/streams/users/charges", headers=ho, json=one)  # a known block: charged
    assert r.status_code == 200, r.text


def test_the_unreleased_ids_message_says_who_may_release_and_how_an_owner_gets_there(
    seeded: Seeded, client: TestClient
) -> None:
    """The owner told to run ``stream max-id`` is refused (403) while its key is bound to no
    context: the message says so, and names the command that binds one (an admin's)."""
    owned_stream(client, seeded, "users", by="user", column="uid", csv=CSV, ids_known=False)
    admin = seeded.headers(seeded.admin)
    r = client.post("/v1/streams/users/queries/count", headers=admin, json={**Q, "last": 1})
    assert r.status_code == 422 and r.json()["error"] == "UnreleasedIdsError", r.text
    detail = r.json()["detail"]
    assert "in a context its key is bound to" in detail, detail
    assert "`blockbudget principal contexts OWNER --context CONTEXT`" in detail, detail
    body = {"context": "team-a", "epsilon": 0.5, "beta": 0.05}
    r = client.post("/v1/streams/users/max-id", headers=seeded.headers(seeded.owner), json=body)
    assert r.status_code == 403, r.text  # the unbound owner, as the message says
