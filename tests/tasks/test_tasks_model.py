"""Selectors, task values and the task table (old rows included)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from blockbudget.budget import Budget, RdpCurve
from blockbudget.dbrevision import HEAD_REVISION
from blockbudget.errors import InvalidRequestError, SchemaRevisionError
from blockbudget.migrations import script_directory, upgrade
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Newest, selector_from_json
from blockbudget.tasks.table import ensure_table, task_from_row, task_row, tasks_table


@pytest.mark.parametrize(
    "sel",
    [
        Named(("s/a", "s/b")),
        Newest(3),
        InRange(2, datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 3, tzinfo=UTC)),
        AnyBlocks(),
        AnyBlocks(5, min_k=2),
    ],
)
def test_selectors_round_trip_through_json(sel: object) -> None:
    text = json.dumps(sel.to_json())  # type: ignore[attr-defined]
    assert selector_from_json(json.loads(text)) == sel


def test_range_times_are_utc() -> None:
    east = timezone(timedelta(hours=2))
    sel = InRange(1, datetime(2024, 1, 1, 2, tzinfo=east), datetime(2024, 1, 2))
    assert sel.start == datetime(2024, 1, 1, tzinfo=UTC) and sel.end.tzinfo is UTC


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "named", "blocks": []},
        {"kind": "named", "blocks": ["a", "a"]},
        {"kind": "newest", "n": 0},
        {"kind": "newest", "n": True},
        {"kind": "range", "k": 1, "start": "2024-01-02", "end": "2024-01-01"},
        {"kind": "range", "k": 1, "start": "yesterday", "end": "2024-01-01"},
        {"kind": "any", "k": 2, "min_k": 3},
        {"kind": "any", "extra": 1},
        {"kind": "last", "n": 1},
        ["named"],
    ],
)
def test_bad_selectors_are_refused(bad: object) -> None:
    with pytest.raises(InvalidRequestError):
        selector_from_json(bad)  # type: ignore[arg-type]


def _task(**kw: object) -> Task:
    base: dict[str, object] = {
        "id": "t1",
        "principal": "alice",
        "stream": "s",
        "context": "team",
        "kind": WorkKind.QUERY,
        "selector": AnyBlocks(3),
        "demand": Budget(epsilon="0.25"),
        "submitted_at": 10.0,
        "state": TaskState.WAITING,
        "work": {"statistic": "count", "epsilon": 0.25},
        "significance": {"s/a": 1.5},
        "deadline": 20.0,
    }
    base.update(kw)
    return Task(**base)  # type: ignore[arg-type]


def test_a_task_round_trips_through_its_row() -> None:
    engine = sa.create_engine("sqlite://")
    ensure_table(engine)
    curve = RdpCurve.from_pure_dp(0.5)
    for task in (_task(), _task(id="t2", demand=curve, kind=WorkKind.BUDGET)):
        with engine.begin() as conn:
            conn.execute(sa.insert(tasks_table).values(**task_row(task, fingerprint="f")))
        with engine.connect() as conn:
            row = conn.execute(sa.select(tasks_table).where(tasks_table.c.id == task.id)).one()
        assert task_from_row(row._mapping) == task


def test_an_old_table_gains_columns_by_the_upgrade_and_its_rows_read_as_budget_tasks() -> None:
    engine = sa.create_engine("sqlite://")
    old = sa.MetaData()
    sa.Table(
        "service_tasks",
        old,
        *[
            sa.Column(c.name, c.type, primary_key=c.primary_key)
            for c in tasks_table.columns
            if c.name not in ("fingerprint", "kind", "selector", "demand", "work", "result")
        ],
    )
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO service_tasks (id, principal, stream, context, epsilon, delta, "
                "blocks, submitted_at, state, note, reservation_id) VALUES ('old', 'bob', 's', "
                "'team', '0.5', '0', '[\"s/1\", \"s/2\"]', 1.0, 'granted', '', 'r1')"
            )
        )
    with pytest.raises(SchemaRevisionError, match="`blockbudget db upgrade`"):
        ensure_table(engine)  # an old table is refused until the upgrade adds the columns
    chain = tuple(reversed([r.revision for r in script_directory().walk_revisions()]))
    assert upgrade(engine).applied == chain and chain[-1] == HEAD_REVISION
    ensure_table(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.select(tasks_table)).one()
    task = task_from_row(row._mapping)
    assert task.kind is WorkKind.BUDGET and task.selector == Named(("s/1", "s/2"))
    assert task.demand == Budget(epsilon="0.5") and task.blocks == ("s/1", "s/2")
    assert task.state is TaskState.GRANTED and task.reservation_id == "r1"
