"""The sample Grafana dashboard (``deploy/grafana/blockbudget-dashboard.json``) is valid JSON whose
every PromQL expression — and every example alert rule of ``deploy/grafana/README.md`` and of
the rule file ``deploy/prometheus/blockbudget-rules.yml`` — names only metrics ``/metrics``
exports, grouped by labels they carry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from blockbudget.service import create_app
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from service.support import Seeded

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "blockbudget-dashboard.json"
README = DASHBOARD.with_name("README.md")
RULES = Path(__file__).parents[2] / "deploy" / "prometheus" / "blockbudget-rules.yml"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
METRIC = re.compile(r"\bblockbudget_[a-z0-9_]+")
GROUPING = re.compile(r"\bby \(([^)]*)\)")


def expressions(dashboard: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["query"]["query"])
    return out


def exported(seeded: Seeded) -> dict[str, set[str]]:
    """Every series name a populated service exports, with its label names."""
    queue = TaskQueue(seeded.platform, scheduler="dpf-n:n=4", leadership=AlwaysLeader())
    app = create_app(seeded.platform, keys=seeded.keys, pump_seconds=3600, tasks=queue)
    h = seeded.headers(seeded.admin)
    block = seeded.platform.store.blocks("flights")[0].block_id
    with TestClient(app) as c:
        for eps, status in ((0.9, 201), (0.5, 409)):  # a reservation, then a refusal
            r = c.post(
                "/v1/streams/flights/reservations",
                headers=h,
                json={"blocks": [block], "epsilon": eps, "context": "team-a"},
            )
            assert r.status_code == status, r.text
        r = c.post(
            "/v1/streams/flights/tasks",
            headers=seeded.headers(seeded.analyst),
            json={"epsilon": 0.3, "context": "team-a", "last": 1},
        )
        assert r.status_code in (200, 201), r.text
        queue.pump()
        text = c.get("/metrics", headers=h).text
    names: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        labels = {k for s in fam.samples for k in s.labels}
        for suffix in SUFFIXES.get(fam.type, ("",)):
            names.setdefault(fam.name + suffix, set()).update(labels)
        for s in fam.samples:
            names.setdefault(s.name, set()).update(s.labels)
    return names


def test_the_dashboard_names_only_exported_metrics(seeded: Seeded) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
    exprs = expressions(dashboard)
    assert len(exprs) >= 14
    rules = re.findall(r"^\s*expr: (.+)$", README.read_text(encoding="utf-8"), re.MULTILINE)
    assert len(rules) == 3  # the README's example alert rules
    exprs += rules
    have = exported(seeded)
    used: set[str] = set()
    for expr in exprs:
        metrics = METRIC.findall(expr)
        assert metrics, expr
        unknown = [m for m in metrics if m not in have]
        assert not unknown, f"{expr}: {unknown} are not exported"
        used.update(metrics)
        carried = set().union(*(have[m] for m in metrics)) | {"le"}
        for group in GROUPING.findall(expr):
            labels = {x.strip() for x in group.split(",")}
            assert labels <= carried, f"{expr}: grouped by {labels - carried}"
    # what the issue asks the dashboard to show
    for needed in (
        "blockbudget_block_remaining_fraction_min",
        "blockbudget_blocks",
        "blockbudget_ledger_events_total",
        "blockbudget_refusals_total",
        "blockbudget_tasks",
        "blockbudget_http_request_duration_seconds_bucket",
        "blockbudget_low_budget_blocks",
    ):
        assert needed in used


def test_the_rule_file_alerts_on_a_restored_ledger(seeded: Seeded) -> None:
    import yaml

    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    have = exported(seeded)
    for name, rule in rules.items():
        metrics = METRIC.findall(rule["expr"])
        assert metrics and all(m in have for m in metrics), (name, rule["expr"])
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"]
    backwards = rules["BlockBudgetAuditSeqWentBackwards"]["expr"]
    assert "blockbudget_audit_seq" in backwards
    assert "delta(" in backwards and "< 0" in backwards and "resets(" in backwards
    behind = rules["BlockBudgetBehindHighWaterMark"]["expr"]
    assert "blockbudget_ledger_behind_mark" in behind and "> 0" in behind
