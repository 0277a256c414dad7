"""Creating a stream: only the call that inserts a stream makes its caller the owner. A taken
name is a 409 for everyone but the stream's owners and admins — the same answer whatever spec
was sent, and never the existing stream's spec — so no one takes over (or reads the spec of) a
stream by re-creating it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from blockbudget.service import Permission, Role
from service.support import Seeded

SAME = {"name": "flights", "epsilon": 1.0}  # the spec the seed created ``flights`` with
OTHER = {"name": "flights", "epsilon": 3.0, "by": "user", "column": "uid"}


def test_re_creating_someone_elses_stream_is_a_409_that_grants_nothing(
    seeded: Seeded, client: TestClient
) -> None:
    seeded.keys.add_principal("mallory", Role.OWNER)
    hm = seeded.headers(seeded.keys.create_key("mallory"))
    answers = set()
    for body in (SAME, OTHER, SAME):
        r = client.post("/v1/streams", headers=hm, json=body)
        assert r.status_code == 409, r.text
        answers.add(r.text)
        for spec_text in ("StreamSpec", "Budget", "epsilon", "time", "accounting", "1.0"):
            assert spec_text not in r.text, r.text
    assert len(answers) == 1  # identical or not, the same refusal: the name is taken
    assert seeded.keys.principal("mallory").streams == ()
    assert client.get("/v1/streams/flights/blocks", headers=hm).status_code == 403
    assert [s["name"] for s in client.get("/v1/streams", headers=hm).json()] == []


def test_owners_and_admins_re_create_idempotently_and_admins_grant_nothing(
    seeded: Seeded, client: TestClient
) -> None:
    ho, hroot = seeded.headers(seeded.owner), seeded.headers(seeded.admin)
    before = {p.name: p.streams for p in seeded.keys.principals()}
    # flights' owner: an identical spec is a no-op, another spec a 409 without the old spec.
    assert client.post("/v1/streams", headers=ho, json=SAME).status_code == 201
    r = client.post("/v1/streams", headers=ho, json=OTHER)
    assert r.status_code == 409 and "StreamSpec" not in r.text, r.text
    # An admin: the same on any stream, and no ACL changes for anyone.
    r = client.post("/v1/streams", headers=hroot, json={"name": "secret", "epsilon": 1.0})
    assert r.status_code == 201 and r.json()["permission"] is None, r.text
    r = client.post("/v1/streams", headers=hroot, json={**OTHER, "name": "secret"})
    assert r.status_code == 409 and "StreamSpec" not in r.text, r.text
    assert {p.name: p.streams for p in seeded.keys.principals()} == before
    # An owner who only reads a stream is refused like a stranger.
    seeded.keys.grant("olga", "secret", Permission.READ)
    r = client.post("/v1/streams", headers=ho, json={"name": "secret", "epsilon": 1.0})
    assert r.status_code == 409, r.text
    assert seeded.keys.principal("olga").permission("secret") is Permission.READ


def test_of_concurrent_creators_exactly_one_owns_the_new_stream(
    seeded: Seeded, client: TestClient
) -> None:
    names = [f"owner{k}" for k in range(6)]
    headers = {}
    for name in names:
        seeded.keys.add_principal(name, Role.OWNER)
        headers[name] = seeded.headers(seeded.keys.create_key(name))

    def create(name: str) -> int:
        body = {"name": "race", "epsilon": 1.0}
        return client.post("/v1/streams", headers=headers[name], json=body).status_code

    with ThreadPoolExecutor(len(names)) as pool:
        statuses = list(pool.map(create, names))
    assert sorted(statuses) == [201] + [409] * (len(names) - 1), statuses
    owners = [n for n in names if seeded.keys.principal(n).permission("race") is not None]
    assert owners == [names[statuses.index(201)]]
    assert seeded.keys.principal(owners[0]).permission("race") is Permission.OWN
