"""Streams take any registered accounting rule over HTTP: a GDP stream is created and charged
μ = Δ/σ for a Gaussian query; an unknown rule is refused with 422 naming the registered ones;
the OpenAPI schema lists the registry."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blockbudget.accounting import make_filter, rule_names
from blockbudget.accounting.gdp import GaussianDp
from blockbudget.budget import Budget
from blockbudget.platform import Platform
from blockbudget.service import KeyStore, Permission, Role, create_app, open_platform


@dataclass
class Http:
    client: TestClient
    keys: KeyStore
    admin: dict[str, str]
    ana: dict[str, str]
    platform: Platform


CSV = "time,v\n" + "".join(f"2024-01-01T{h:02d}:00:00,{h}\n" for h in range(10))


@pytest.fixture
def http(tmp_path: Path) -> Iterator[Http]:
    platform = open_platform(tmp_path / "h", None, group_commit=False)
    keys = KeyStore(platform.ledger.engine)
    platform.add_context("team")
    keys.add_principal("root", Role.ADMIN)
    keys.add_principal("ana", Role.ANALYST, contexts=("team",))
    admin = {"Authorization": f"Bearer {keys.create_key('root')}"}
    ana = {"Authorization": f"Bearer {keys.create_key('ana')}"}
    try:
        with TestClient(create_app(platform, keys=keys)) as client:
            yield Http(client, keys, admin, ana, platform)
    finally:
        platform.close()


def test_an_unknown_rule_is_refused_with_the_registered_ones(http: Http) -> None:
    client, admin = http.client, http.admin
    body = {"name": "g", "epsilon": 1, "delta": 1e-6, "accounting": "nope"}
    r = client.post("/v1/streams", headers=admin, json=body)
    assert r.status_code == 422, r.text
    assert "unknown accounting rule 'nope'" in r.json()["detail"]
    assert f"registered: {', '.join(rule_names())}" in r.json()["detail"]
    assert client.get("/v1/streams", headers=admin).json() == []  # nothing created
    schema = client.get("/openapi.json").json()["components"]["schemas"]["StreamIn"]
    assert schema["properties"]["accounting"]["enum"] == list(rule_names())
    assert {"basic", "strong", "rdp", "gdp", "whitehouse"} <= set(rule_names())


def test_a_gdp_stream_is_charged_mu_of_its_gaussian_query(http: Http) -> None:
    client, keys, admin, ana = http.client, http.keys, http.admin, http.ana
    body = {"name": "g", "epsilon": 1, "delta": 1e-6, "accounting": "gdp"}
    r = client.post("/v1/streams", headers=admin, json=body)
    assert r.status_code == 201 and r.json()["accounting"] == "gdp", r.text
    r = client.post(
        "/v1/streams/g/ingest", headers={**admin, "Content-Type": "text/csv"}, content=CSV.encode()
    )
    assert r.status_code == 201, r.text
    keys.grant("ana", "g", Permission.READ)
    query = {"version": 2, "statistic": "count", "epsilon": 0.5, "delta": 1e-7}
    body = {"query": {**query, "mechanism": "gaussian"}, "last": 1, "context": "team"}
    r = client.post("/v1/streams/g/query", headers=ana, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    (part,) = out["parts"]
    assert part["noise"] == "gaussian" and part["sensitivity"] == 1.0
    mu = GaussianDp.gaussian(sigma=part["scale"], sensitivity=1.0)
    assert out["cost"] == mu.to_json() and out["cost"]["kind"] == "gdp"
    assert abs(Decimal(out["cost"]["mu"]) - Decimal(1) / Decimal(repr(part["scale"]))) < Decimal(
        "1e-15"
    )  # μ = Δ₂/σ (Dong, Roth & Su 2022, Thm 2.7)
    f = make_filter("gdp", capacity=Budget(epsilon=1, delta="1e-6"))
    (block,) = http.platform.ledger.states(stream="g", context="team")
    assert block.charged == f.features(mu) and block.reserved == f.zero()
