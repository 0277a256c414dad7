"""The last usable admin key is never revoked (issue 30, item 5): over HTTP a 409 that says
why and what to do (issue another admin key first), on the command line exit 2 with the same
words; nothing changes. A rotated key in its grace period, a disabled admin's key and a
non-admin's key do not keep an administrator able to sign in, so they do not count."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.errors import LastAdminKeyError
from blockbudget.service import Role
from blockbudget.service.auth import PrincipalState, api_keys
from service.support import Seeded


def _key_id(key: str) -> str:
    return key.split("_")[1]


def _keys(seeded: Seeded) -> list[Any]:
    with seeded.platform.ledger.engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(api_keys.select()).all())


def test_the_only_admin_cannot_revoke_its_last_key(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    before = _keys(seeded)
    r = client.delete(f"/v1/principals/root/keys/{_key_id(seeded.admin)}", headers=h)
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["error"] == "LastAdminKeyError"
    assert "last usable admin key" in body["detail"]
    assert "blockbudget principal key create root" in body["detail"]
    assert "POST /v1/principals/root/keys" in body["detail"]
    assert _keys(seeded) == before  # nothing revoked
    assert client.get("/v1/whoami", headers=h).status_code == 200
    # with a second key issued first, the first one can go; then the second is the last
    second = client.post("/v1/principals/root/keys", headers=h).json()["api_key"]
    r = client.delete(f"/v1/principals/root/keys/{_key_id(seeded.admin)}", headers=h)
    assert r.status_code == 200, r.text
    h2 = seeded.headers(second)
    r = client.delete(f"/v1/principals/root/keys/{_key_id(second)}", headers=h2)
    assert r.status_code == 409 and r.json()["error"] == "LastAdminKeyError"
    assert client.get("/v1/whoami", headers=h2).status_code == 200
    # other principals' keys are revoked as before, and an already revoked key is no refusal
    r = client.delete(f"/v1/principals/ana/keys/{_key_id(seeded.analyst)}", headers=h2)
    assert r.status_code == 200
    r = client.delete(f"/v1/principals/root/keys/{_key_id(seeded.admin)}", headers=h2)
    assert r.status_code == 200


def test_a_key_in_its_grace_period_does_not_count(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    r = client.post(
        f"/v1/principals/root/keys/{_key_id(seeded.admin)}/rotate",
        headers=h,
        json={"grace_seconds": 3600},
    )
    assert r.status_code == 200, r.text
    new = r.json()["api_key"]
    # the old key works for another hour, then nobody could sign in: refused
    r = client.delete(f"/v1/principals/root/keys/{_key_id(new)}", headers=h)
    assert r.status_code == 409 and r.json()["error"] == "LastAdminKeyError"
    # the old key, in its grace period, may go: the new one stays
    r = client.delete(f"/v1/principals/root/keys/{_key_id(seeded.admin)}", headers=h)
    assert r.status_code == 200, r.text
    assert client.get("/v1/whoami", headers=seeded.headers(new)).status_code == 200


def test_only_an_active_admins_lasting_key_counts(seeded: Seeded, client: TestClient) -> None:
    seeded.keys.add_principal("ada", Role.ADMIN)
    ada = seeded.keys.create_key("ada")
    seeded.keys.set_state("ada", PrincipalState.DISABLED)
    with pytest.raises(LastAdminKeyError, match="last usable admin key"):
        seeded.keys.revoke_key(_key_id(seeded.admin), principal="root")
    seeded.keys.set_state("ada", PrincipalState.ACTIVE)
    seeded.keys.revoke_key(_key_id(seeded.admin), principal="root")  # ada can still sign in
    r = client.delete(f"/v1/principals/ada/keys/{_key_id(ada)}", headers=seeded.headers(ada))
    assert r.status_code == 409 and r.json()["error"] == "LastAdminKeyError"


def test_concurrent_revocations_leave_one_admin_key(seeded: Seeded) -> None:
    """Two admins revoke each other's only key at once: exactly one revocation succeeds."""
    seeded.keys.add_principal("ada", Role.ADMIN)
    ada = seeded.keys.create_key("ada")
    targets = [("root", _key_id(seeded.admin)), ("ada", _key_id(ada))]
    barrier = threading.Barrier(len(targets))
    outcomes: list[str] = []

    def revoke(name: str, key_id: str) -> None:
        barrier.wait()
        try:
            seeded.keys.revoke_key(key_id, principal=name)
            outcomes.append("revoked")
        except LastAdminKeyError:
            outcomes.append("refused")

    threads = [threading.Thread(target=revoke, args=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused", "revoked"]
    left = [k for name in ("root", "ada") for k in seeded.keys.keys(name) if not k.revoked]
    assert len(left) == 1


def test_the_cli_refuses_the_last_admin_key(seeded: Seeded, database_url: str | None) -> None:
    runner = CliRunner()
    home = ["--home", str(seeded.platform.home)]
    if database_url is not None:
        home += ["--database", database_url]
    key_id = _key_id(seeded.admin)
    before = _keys(seeded)
    r = runner.invoke(app, ["principal", "key", "revoke", "root", key_id, *home])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "LastAdminKeyError" in text and "last usable admin key" in text
    assert "blockbudget principal key create root" in text
    r = runner.invoke(app, ["principal", "key", "revoke", "root", key_id, "--json", *home])
    assert r.exit_code == 2
    assert json.loads(r.output)["error"]["type"] == "LastAdminKeyError"
    assert _keys(seeded) == before
