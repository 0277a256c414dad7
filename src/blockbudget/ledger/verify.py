"""Replay the audit log and compare it with the ledger's tables (invariant 5 in
docs/architecture.md).

:func:`verify_ledger` replays from the last verified checkpoint
(:mod:`blockbudget.ledger.checkpoint`) when there is one — after checking that the log's event
at the checkpoint still has the hash the checkpoint recorded — or from scratch (``full``). It
streams the events in seq order, keeping only the state (contexts, blocks, vectors, the open
reservations and a multiset hash of the closed ones), and

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
   and no reservation or charge may name a context after its ``context_closed`` event, and a
   ``reconciled`` event must find every block registered before it retired;
4. compares the rebuilt state with the tables (contexts, blocks, budgets, reservations,
   requests) — all of them, whatever the checkpoint, so a table row changed after the
   checkpoint is found without a full replay.

Problems are collected, not raised; :meth:`Ledger.verify_or_raise` raises AuditError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, select

from blockbudget.accounting import Accounting, Filter, add_vectors, make_filter, sub_vectors
from blockbudget.budget import Budget, cost_from_json
from blockbudget.errors import BlockBudgetError
from blockbudget.ledger import checkpoint as ck
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
    #: Open reservations only; closed ones are folded into ``closed_res``.
    res: dict[str, _Res] = field(default_factory=dict)
    closed_res: ck.MultisetHash = field(default_factory=ck.MultisetHash)
    #: Events verified by the checkpoint the replay started from.
    before: int = 0
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
        if not f.fits(used) and not f.fits_before_proof(used):
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
        _context_added(rp, ts, ctx, p)
        return
    if kind is EventKind.CONTEXT_CLOSED:
        _context_closed(rp, seq, ts, ctx, p)
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
    if kind is EventKind.RECONCILED:
        _reconciled(rp, seq, ctx, p)
        return
    if ctx is None:
        raise _Bad(f"a {kind.value} event needs a context")
    if kind is EventKind.RESERVED:
        _reserved(rp, seq, ctx, p)
        return
    if kind is EventKind.CHARGED:
        _charged(rp, seq, ts, ctx, p)
        return
    _reservation_closed(rp, seq, kind, ctx, p)  # RELEASED or EXPIRED


def _over_proved_bound(rp: _Replay) -> tuple[str, ...]:
    """One note per block and context whose history a rule admitted before it was capped at
    its proved bound and that exceeds that bound (``rdp`` version 1; see
    :meth:`~blockbudget.accounting.filters.Filter.fits_before_proof`)."""
    notes = []
    for (block, ctx), charged in sorted(rp.charged.items()):
        reg = rp.reg(block)
        used = add_vectors(charged, rp.reserved.get((block, ctx), reg.filter.zero()))
        if reg.filter.fits(used) or not reg.filter.fits_before_proof(used):
            continue  # within the bound, or an overspend (reported as a problem)
        state = (
            "it is retired"
            if reg.retired
            else "it admits nothing more in this context, and retires once every context is "
            "spent (Platform.retire_exhausted, POST /v1/streams/{stream}/retire)"
        )
        notes.append(
            f"block {block!r} in context {ctx!r} was spent under {reg.accounting.value} "
            f"version 1 beyond the proved capacity of its {reg.capacity}; {state}"
        )
    return tuple(notes)


def _reconciled(rp: _Replay, seq: int, ctx: str | None, p: Any) -> None:
    """A ``reconciled`` event changes no budget; it must follow the retirement of every block
    registered before it (a reconciliation counts every block as spent)."""
    if ctx is not None:
        raise _Bad("a reconciled event names no context")
    mark, epoch = p.get("mark"), p.get("epoch")
    if not isinstance(mark, dict) or not isinstance(epoch, int) or epoch < 1:
        raise _Bad("a reconciled event needs its mark and an epoch >= 1")
    if not isinstance(p.get("tombstones"), list) or not isinstance(p.get("retired"), int):
        raise _Bad("a reconciled event needs its retired count and tombstones")
    live = sorted(b for b, reg in rp.regs.items() if not reg.retired)
    if live:
        rp.problem(seq, f"a reconciled event leaves {len(live)} block(s) live: {live[:5]}")


def _context_added(rp: _Replay, ts: float, ctx: str | None, p: Any) -> None:
    name, description = p["name"], p["description"]
    if not isinstance(name, str) or not isinstance(description, str):
        raise _Bad("a context_added event needs a string name and description")
    if ctx != name:
        raise _Bad(f"a context_added event for {name!r} carries context {ctx!r}")
    if name in rp.added:
        raise _Bad(f"context {name!r} is added twice")
    rp.added[name] = (description, ts)


def _context_closed(rp: _Replay, seq: int, ts: float, ctx: str | None, p: Any) -> None:
    name = p["name"]
    if ctx != name or name not in rp.added:
        raise _Bad(f"a context_closed event for {name!r} (context {ctx!r}), never added")
    if name in rp.closed:
        raise _Bad(f"context {name!r} is closed twice")
    if any(r.state is ReservationState.OPEN and r.context == name for r in rp.res.values()):
        rp.problem(seq, f"context {name!r} is closed while it holds an open reservation")
    rp.closed[name] = ts


def _reserved(rp: _Replay, seq: int, ctx: str, p: Any) -> None:
    rid, block_ids = p["reservation_id"], list(p["blocks"])
    if rid in rp.res:
        raise _Bad(f"reservation {rid!r} is created twice")
    _live(rp, block_ids, "a reservation")
    feats = {b: rp.features(b, p["cost"]) for b in block_ids}
    rp.res[rid] = _Res(ctx, tuple(block_ids), float(p["expires_at"]), dict(feats))
    for b in block_ids:
        charged, reserved = rp.vectors(b, ctx)
        rp.put(seq, b, ctx, charged, add_vectors(reserved, feats[b]))


def _charged(rp: _Replay, seq: int, ts: float, ctx: str, p: Any) -> None:
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


def _reservation_closed(rp: _Replay, seq: int, kind: EventKind, ctx: str, p: Any) -> None:
    """A RELEASED or EXPIRED event: the reservation's remaining features go back."""
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
    del rp.res[rid]
    rp.closed_res.add(ck.closed_element(rid, res.state.value, list(res.remaining)))


def _replay_log(conn: Connection, rp: _Replay, after: int, prev: str) -> tuple[int, int, str]:
    """Replay the events after seq ``after`` (whose hash is ``prev``); returns how many were
    replayed, the last seq and the last hash."""
    expected, count = after + 1, 0
    q = (
        select(audit)
        .where(audit.c.seq > after)
        .order_by(audit.c.seq)
        .execution_options(yield_per=2000)
    )
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
    return count, expected - 1, prev


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

    _compare_reservations(conn, rp)

    for r in conn.execute(select(requests.c.request_id, requests.c.seq)):
        if int(r.seq) > tip:
            rp.problem(None, f"request {r.request_id!r} points past the end of the log")


def _remaining_rows(conn: Connection) -> Iterator[tuple[str, dict[str, Vector]]]:
    """Per reservation, in id order, the remaining vector of each of its blocks (streamed)."""
    q = (
        select(reservation_blocks)
        .order_by(reservation_blocks.c.reservation_id, reservation_blocks.c.block_id)
        .execution_options(yield_per=2000)
    )
    current: str | None = None
    held: dict[str, Vector] = {}
    for r in conn.execute(q):
        if r.reservation_id != current:
            if current is not None:
                yield current, held
            current, held = r.reservation_id, {}
        held[r.block_id] = decode_vector(r.remaining)
    if current is not None:
        yield current, held


def _compare_reservations(conn: Connection, rp: _Replay) -> None:
    """Open reservations one by one; closed ones through their multiset hashes (both sides
    streamed in id order, so memory holds only the open ones)."""
    rows = _remaining_rows(conn)
    pending = next(rows, None)
    table_closed = ck.MultisetHash()
    open_seen: set[str] = set()
    q = (
        select(reservations.c.reservation_id, reservations.c.state)
        .order_by(reservations.c.reservation_id)
        .execution_options(yield_per=2000)
    )
    for rid, state in conn.execute(q):
        while pending is not None and pending[0] < rid:
            rp.problem(None, f"reservation {pending[0]!r} has blocks but no reservation row")
            pending = next(rows, None)
        held: dict[str, Vector] = {}
        if pending is not None and pending[0] == rid:
            held, pending = pending[1], next(rows, None)
        if state == ReservationState.OPEN.value:
            open_seen.add(rid)
            res = rp.res.get(rid)
            if res is None:
                rp.problem(None, f"reservation {rid!r}: table state open, the log closed it or "
                           "never reserved it")  # fmt: skip
            elif held != res.remaining:
                rp.problem(None, f"reservation {rid!r}: remaining differs from replay")
            continue
        if rid in rp.res:
            rp.problem(None, f"reservation {rid!r}: table state {state}, replayed open")
        if any(any(v) for v in held.values()):
            rp.problem(None, f"reservation {rid!r} is {state} but still holds budget")
        table_closed.add(ck.closed_element(rid, state, list(held)))
    for rid in sorted(rp.res.keys() - open_seen):
        rp.problem(None, f"reservation {rid!r} is open in the log but not in the table")
    if table_closed != rp.closed_res:
        rp.problem(
            None,
            f"the closed reservations differ: the log closed {rp.closed_res.count}, the table "
            f"holds {table_closed.count} (ids, final states or blocks differ)",
        )


def verify_ledger(
    conn: Connection, *, full: bool = True
) -> tuple[VerifyReport, dict[str, Any] | None]:
    """Replay the log (from the last checkpoint unless ``full``) and compare (see the module
    docstring). Returns the report and, when it is clean and covers new events, the state to
    store as the next checkpoint."""
    rp = _Replay()
    after, prev = 0, GENESIS_HASH
    if not full:
        found, why = ck.load_latest(conn)
        if why is not None:
            rp.problem(None, f"{why}; run a full verification")
        elif found is not None:
            row = conn.execute(select(audit.c.hash).where(audit.c.seq == found.seq)).first()
            if row is None or row.hash != found.hash:
                rp.problem(
                    None,
                    f"the log's event {found.seq} is not the one the checkpoint verified (the "
                    "log before the checkpoint was changed); run a full verification",
                )
            else:
                restore(rp, found.state)
                after, prev = found.seq, found.hash
    count, tip, tip_hash = _replay_log(conn, rp, after, prev)
    _compare_tables(conn, rp, tip)
    report = VerifyReport(
        ok=not rp.problems,
        events=rp.before + count,
        blocks=len(rp.regs),
        contexts=len(rp.added),
        problems=tuple(rp.problems),
        replayed=count,
        checkpoint_seq=after,
        notes=_over_proved_bound(rp),
    )
    if not report.ok or tip == 0 or (tip == after and not full):
        return report, None
    return report, snapshot(rp, seq=tip, hash_=tip_hash, events=rp.before + count)


def snapshot(rp: _Replay, *, seq: int, hash_: str, events: int) -> dict[str, Any]:
    """The replayed state as a checkpoint's JSON (see :mod:`blockbudget.ledger.checkpoint`)."""
    params: dict[str, int] = {}
    regs = []
    for block, r in sorted(rp.regs.items()):
        key = json.dumps([r.stream, r.accounting.value, r.capacity.to_json(), r.slack_delta])
        regs.append([block, params.setdefault(key, len(params)), r.retired])
    keys = sorted(rp.charged.keys() | rp.reserved.keys())
    return {
        "version": ck.STATE_VERSION,
        "seq": seq,
        "hash": hash_,
        "events": events,
        "added": {k: list(v) for k, v in sorted(rp.added.items())},
        "closed": dict(sorted(rp.closed.items())),
        "params": [json.loads(k) for k in params],
        "blocks": regs,
        "budgets": [[b, c, *([str(v) for v in vec] for vec in rp.vectors(b, c))] for b, c in keys],
        "open": [_open_json(rid, r) for rid, r in sorted(rp.res.items())],
        "closed_reservations": [rp.closed_res.count, rp.closed_res.hex()],
    }


def _open_json(rid: str, r: _Res) -> list[Any]:
    held = {b: [str(v) for v in vec] for b, vec in r.remaining.items()}
    return [rid, r.context, list(r.blocks), r.expires_at, held]


def restore(rp: _Replay, state: dict[str, Any]) -> None:
    """Load a checkpoint's state (see :func:`snapshot`) into an empty replay."""
    rp.before = int(state["events"])
    rp.added = {k: (str(v[0]), float(v[1])) for k, v in state["added"].items()}
    rp.closed = {k: float(v) for k, v in state["closed"].items()}
    shared = []
    for stream, acc, cap, slack in state["params"]:
        accounting, capacity = Accounting(acc), Budget.from_json(cap)
        f = make_filter(accounting, capacity=capacity, slack_delta=slack)
        shared.append((stream, accounting, capacity, slack, f))
    for block, i, retired in state["blocks"]:
        stream, accounting, capacity, slack, f = shared[i]
        rp.regs[block] = _Reg(stream, accounting, capacity, slack, f, retired=bool(retired))
    for block, ctx, charged, reserved in state["budgets"]:
        rp.charged[(block, ctx)] = tuple(int(v) for v in charged)
        rp.reserved[(block, ctx)] = tuple(int(v) for v in reserved)
    for rid, ctx, blocks_, expires_at, remaining in state["open"]:
        held = {b: tuple(int(v) for v in vec) for b, vec in remaining.items()}
        rp.res[rid] = _Res(ctx, tuple(blocks_), float(expires_at), held)
    count, lanes = state["closed_reservations"]
    rp.closed_res = ck.MultisetHash(bytes.fromhex(lanes), int(count))
