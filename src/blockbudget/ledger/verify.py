"""Replay the audit log from scratch and compare it with the ledger's tables (invariant 5
in docs/architecture.md).

:func:`verify_ledger` reads every event in seq order and

1. checks the chain: seq 1, 2, 3, … without gaps, each ``prev_hash`` equal to the previous
   event's hash, each ``hash`` equal to the recomputed SHA-256 (:mod:`blockbudget.ledger.audit`);
2. rebuilds, from the events alone, the set of registered contexts, every block's registration
   and filter, every (block, context) ``charged`` and ``reserved`` vector, and every
   reservation's remaining features and state — features are recomputed from the costs in the
   payloads;
3. checks every filter after every event: ``filter.fits(charged + reserved)`` must hold for every
   touched block at every point in history (no overspend ever), no vector may go negative, no
   draw may exceed its reservation or happen after its expiry, no charge or reservation may
   touch a retired block, no event may name a context that no earlier ``context_added``
   event registered (a context minted outside :meth:`Ledger.add_context` would be fresh budget),
   and no reservation or charge may name a context after its ``context_closed`` event;
4. compares the rebuilt state with the tables (contexts, blocks, budgets, reservations,
   requests).

Problems are collected, not raised; :meth:`Ledger.verify_or_raise` raises AuditError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, select

from blockbudget.accounting import Accounting, Filter, add_vectors, make_filter, sub_vectors
from blockbudget.budget import Budget, cost_from_json
from blockbudget.errors import BlockBudgetError
from blockbudget.ledger.audit import EVENT_VERSION, GENESIS_HASH, event_hash
from blockbudget.ledger.schema import (
    audit,
    blocks,
    budgets,
    contexts,
    requests,
    reservation_blocks,
    reservations,
)
from blockbudget.ledger.types import (
    EventKind,
    ReservationState,
    Vector,
    VerifyReport,
    decode_vector,
)


@dataclass
class _Reg:
    stream: str
    accounting: Accounting
    capacity: Budget
    slack_delta: float | None
    filter: Filter
    retired: bool = False


@dataclass
class _Res:
    context: str
    blocks: tuple[str, ...]
    expires_at: float
    remaining: dict[str, Vector]
    state: ReservationState = ReservationState.OPEN


@dataclass
class _Replay:
    problems: list[str] = field(default_factory=list)
    #: Registered contexts: name -> (description, ts of the context_added event).
    added: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: Closed contexts: name -> ts of the context_closed event.
    closed: dict[str, float] = field(default_factory=dict)
    regs: dict[str, _Reg] = field(default_factory=dict)
    charged: dict[tuple[str, str], Vector] = field(default_factory=dict)
    reserved: dict[tuple[str, str], Vector] = field(default_factory=dict)
    res: dict[str, _Res] = field(default_factory=dict)
    _features: dict[tuple[int, str], Vector] = field(default_factory=dict)

    def problem(self, seq: int | None, text: str) -> None:
        self.problems.append(f"event {seq}: {text}" if seq is not None else text)

    def reg(self, block: str) -> _Reg:
        r = self.regs.get(block)
        if r is None:
            raise _Bad(f"block {block!r} is used before any block_added event registers it")
        return r

    def features(self, block: str, cost_json: dict[str, Any]) -> Vector:
        f = self.reg(block).filter
        key = (id(f), json.dumps(cost_json, sort_keys=True))
        vec = self._features.get(key)
        if vec is None:
            vec = f.features(cost_from_json(cost_json))
            self._features[key] = vec
        return vec

    def vectors(self, block: str, ctx: str) -> tuple[Vector, Vector]:
        zero = self.reg(block).filter.zero()
        return self.charged.get((block, ctx), zero), self.reserved.get((block, ctx), zero)

    def put(self, seq: int, block: str, ctx: str, charged: Vector, reserved: Vector) -> None:
        if any(v < 0 for v in charged) or any(v < 0 for v in reserved):
            self.problem(seq, f"{block!r}/{ctx!r} goes negative: {charged} / {reserved}")
        self.charged[(block, ctx)] = charged
        self.reserved[(block, ctx)] = reserved
        f = self.reg(block).filter
        used = add_vectors(charged, reserved)
        if not f.fits(used):
            self.problem(
                seq,
                f"overspend: block {block!r} in context {ctx!r} no longer fits its "
                f"{f.describe()} (charged + reserved = {list(used)})",
            )


class _Bad(Exception):
    """A malformed or impossible event (reported as a problem)."""


def _live(rp: _Replay, block_ids: list[str], what: str) -> None:
    dead = [b for b in block_ids if rp.reg(b).retired]
    if dead:
        raise _Bad(f"{what} touches retired block(s) {dead}")


def _apply(rp: _Replay, seq: int, ts: float, kind: EventKind, ctx: str | None, p: Any) -> None:
    if kind is EventKind.CONTEXT_ADDED:
        name, description = p["name"], p["description"]
        if not isinstance(name, str) or not isinstance(description, str):
            raise _Bad("a context_added event needs a string name and description")
        if ctx != name:
            raise _Bad(f"a context_added event for {name!r} carries context {ctx!r}")
        if name in rp.added:
            raise _Bad(f"context {name!r} is added twice")
        rp.added[name] = (description, ts)
        return
    if kind is EventKind.CONTEXT_CLOSED:
        name = p["name"]
        if ctx != name or name not in rp.added:
            raise _Bad(f"a context_closed event for {name!r} (context {ctx!r}), never added")
        if name in rp.closed:
            raise _Bad(f"context {name!r} is closed twice")
        if any(r.state is ReservationState.OPEN and r.context == name for r in rp.res.values()):
            rp.problem(seq, f"context {name!r} is closed while it holds an open reservation")
        rp.closed[name] = ts
        return
    if kind in (EventKind.RESERVED, EventKind.CHARGED) and ctx in rp.closed:
        rp.problem(seq, f"a {kind.value} event in context {ctx!r}, which was closed before")
    if ctx is not None and ctx not in rp.added:
        # Reported, then replayed anyway, so that the comparison with the tables still works.
        rp.problem(
            seq,
            f"a {kind.value} event in context {ctx!r}, which no earlier context_added event "
            "registered",
        )
    if kind is EventKind.BLOCK_ADDED:
        block = p["block"]
        if block in rp.regs:
            raise _Bad(f"block {block!r} is added twice")
        acc = Accounting(p["accounting"])
        cap = Budget.from_json(p["capacity"])
        slack = p["slack_delta"]
        f = make_filter(acc, capacity=cap, slack_delta=slack)
        rp.regs[block] = _Reg(p["stream"], acc, cap, slack, f)
        return
    if kind is EventKind.RETIRED:
        for b in p["blocks"]:
            rp.reg(b).retired = True
        return
    if ctx is None:
        raise _Bad(f"a {kind.value} event needs a context")
    if kind is EventKind.RESERVED:
        rid, block_ids = p["reservation_id"], list(p["blocks"])
        if rid in rp.res:
            raise _Bad(f"reservation {rid!r} is created twice")
        _live(rp, block_ids, "a reservation")
        feats = {b: rp.features(b, p["cost"]) for b in block_ids}
        rp.res[rid] = _Res(ctx, tuple(block_ids), float(p["expires_at"]), dict(feats))
        for b in block_ids:
            charged, reserved = rp.vectors(b, ctx)
            rp.put(seq, b, ctx, charged, add_vectors(reserved, feats[b]))
        return
    if kind is EventKind.CHARGED:
        block_ids, rid = list(p["blocks"]), p["reservation_id"]
        _live(rp, block_ids, "a charge")
        feats = {b: rp.features(b, p["cost"]) for b in block_ids}
        if rid is None:
            for b in block_ids:
                charged, reserved = rp.vectors(b, ctx)
                rp.put(seq, b, ctx, add_vectors(charged, feats[b]), reserved)
            return
        res = rp.res.get(rid)
        if res is None or res.state is not ReservationState.OPEN or res.context != ctx:
            raise _Bad(f"a draw on reservation {rid!r}, which is not open in context {ctx!r}")
        if ts >= res.expires_at:
            rp.problem(seq, f"a draw on reservation {rid!r} after it expired")
        for b in block_ids:
            if b not in res.remaining:
                raise _Bad(f"a draw on block {b!r}, which reservation {rid!r} does not hold")
            left = sub_vectors(res.remaining[b], feats[b])
            if any(v < 0 for v in left):
                rp.problem(seq, f"a draw exceeds reservation {rid!r} on block {b!r}")
            res.remaining[b] = left
            charged, reserved = rp.vectors(b, ctx)
            rp.put(seq, b, ctx, add_vectors(charged, feats[b]), sub_vectors(reserved, feats[b]))
        return
    # RELEASED or EXPIRED
    rid = p["reservation_id"]
    res = rp.res.get(rid)
    if res is None or res.state is not ReservationState.OPEN or res.context != ctx:
        raise _Bad(f"{kind.value} of reservation {rid!r}, which is not open in {ctx!r}")
    returned = {b: tuple(int(v) for v in vec) for b, vec in p["returned"].items()}
    if returned != res.remaining:
        rp.problem(seq, f"{kind.value} of {rid!r} returns {returned}, replay says {res.remaining}")
    if kind is EventKind.EXPIRED and float(p["now"]) < res.expires_at:
        rp.problem(seq, f"reservation {rid!r} expired before its expiry time")
    for b, vec in res.remaining.items():
        charged, reserved = rp.vectors(b, ctx)
        rp.put(seq, b, ctx, charged, sub_vectors(reserved, vec))
        res.remaining[b] = (0,) * len(vec)
    is_expiry = kind is EventKind.EXPIRED
    res.state = ReservationState.EXPIRED if is_expiry else ReservationState.CLOSED


def _replay_log(conn: Connection, rp: _Replay) -> tuple[int, int]:
    prev, expected, count = GENESIS_HASH, 1, 0
    q = select(audit).order_by(audit.c.seq).execution_options(yield_per=2000)
    for row in conn.execute(q):
        count += 1
        m = row._mapping
        seq = int(m["seq"])
        if seq != expected:
            rp.problem(seq, f"sequence gap: expected seq {expected}")
        expected = seq + 1
        if m["prev_hash"] != prev:
            rp.problem(seq, "prev_hash does not match the previous event's hash (chain broken)")
        digest = event_hash(
            prev_hash=m["prev_hash"],
            seq=seq,
            ts=float(m["ts"]),
            kind=m["kind"],
            version=int(m["version"]),
            request_id=m["request_id"],
            context=m["context"],
            payload=m["payload"],
        )
        if digest != m["hash"]:
            rp.problem(seq, "hash mismatch: the event was modified after it was written")
        prev = m["hash"]
        try:
            kind = EventKind(m["kind"])
            if int(m["version"]) != EVENT_VERSION:
                raise _Bad(f"unknown version {m['version']} of {kind.value}")
            _apply(rp, seq, float(m["ts"]), kind, m["context"], json.loads(m["payload"]))
        except (_Bad, KeyError, ValueError, TypeError, BlockBudgetError) as exc:
            rp.problem(seq, f"cannot replay ({type(exc).__name__}: {exc})")
    return count, expected - 1


def _compare_contexts(conn: Connection, rp: _Replay) -> None:
    table: set[str] = set()
    for r in conn.execute(select(contexts)):
        table.add(r.name)
        logged = rp.added.get(r.name)
        if logged is None:
            rp.problem(None, f"context {r.name!r} is in the table but no event added it")
            continue
        if (r.description, float(r.created_at)) != logged:
            rp.problem(
                None,
                f"context {r.name!r}: table description / created_at "
                f"({r.description!r}, {float(r.created_at)!r}) differ from the log "
                f"({logged[0]!r}, {logged[1]!r})",
            )
        closed_at = None if r.closed_at is None else float(r.closed_at)
        if closed_at != rp.closed.get(r.name):
            rp.problem(
                None,
                f"context {r.name!r}: table closed_at {closed_at!r} differs from the log "
                f"({rp.closed.get(r.name)!r})",
            )
    for name in sorted(rp.added.keys() - table):
        rp.problem(None, f"context {name!r} was added in the log but is missing from the table")


def _compare_tables(conn: Connection, rp: _Replay, tip: int) -> None:
    _compare_contexts(conn, rp)
    table_blocks = set()
    for r in conn.execute(select(blocks)):
        table_blocks.add(r.block_id)
        reg = rp.regs.get(r.block_id)
        if reg is None:
            rp.problem(None, f"block {r.block_id!r} is in the table but no event added it")
            continue
        same = (
            r.stream == reg.stream
            and r.accounting == reg.accounting.value
            and Decimal(r.capacity_epsilon) == reg.capacity.epsilon
            and Decimal(r.capacity_delta) == reg.capacity.delta
            and r.slack_delta == reg.slack_delta
        )
        if not same:
            rp.problem(None, f"block {r.block_id!r}: table parameters differ from the log")
        if bool(r.retired) != reg.retired:
            rp.problem(None, f"block {r.block_id!r}: retired={bool(r.retired)}, log says not")
    for b in sorted(rp.regs.keys() - table_blocks):
        rp.problem(None, f"block {b!r} was added in the log but is missing from the table")

    seen: set[tuple[str, str]] = set()
    for r in conn.execute(select(budgets)):
        key = (r.block_id, r.context)
        seen.add(key)
        if r.block_id not in rp.regs:
            continue
        want = rp.vectors(r.block_id, r.context)
        got = (decode_vector(r.charged), decode_vector(r.reserved))
        if got != want:
            rp.problem(
                None,
                f"{r.block_id!r}/{r.context!r}: table charged/reserved {got} != replayed {want}",
            )
    for key in sorted((rp.charged.keys() | rp.reserved.keys()) - seen):
        if any(rp.charged.get(key, ())) or any(rp.reserved.get(key, ())):
            rp.problem(None, f"{key[0]!r}/{key[1]!r} has budget in the log but no table row")

    table_res: dict[str, dict[str, Vector]] = {}
    for r in conn.execute(select(reservation_blocks)):
        table_res.setdefault(r.reservation_id, {})[r.block_id] = decode_vector(r.remaining)
    seen_res: set[str] = set()
    for r in conn.execute(select(reservations)):
        seen_res.add(r.reservation_id)
        res = rp.res.get(r.reservation_id)
        if res is None:
            rp.problem(None, f"reservation {r.reservation_id!r} has no reserved event")
            continue
        if r.state != res.state.value:
            rp.problem(
                None,
                f"reservation {r.reservation_id!r}: table state {r.state}, "
                f"replayed {res.state.value}",
            )
        if table_res.get(r.reservation_id, {}) != res.remaining:
            rp.problem(None, f"reservation {r.reservation_id!r}: remaining differs from replay")
    for rid in sorted(rp.res.keys() - seen_res):
        rp.problem(None, f"reservation {rid!r} is in the log but missing from the table")

    for r in conn.execute(select(requests.c.request_id, requests.c.seq)):
        if int(r.seq) > tip:
            rp.problem(None, f"request {r.request_id!r} points past the end of the log")


def verify_ledger(conn: Connection) -> VerifyReport:
    """Replay the log and compare (see the module docstring)."""
    rp = _Replay()
    count, tip = _replay_log(conn, rp)
    _compare_tables(conn, rp, tip)
    return VerifyReport(
        ok=not rp.problems,
        events=count,
        blocks=len(rp.regs),
        contexts=len(rp.added),
        problems=tuple(rp.problems),
    )
