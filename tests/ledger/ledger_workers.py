"""Child-process code for the multi-process and kill -9 tests (no pytest import: spawned
children import this module by name, and the crash tests run it as a script)."""

from __future__ import annotations

import json
import random
import sys
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError, ReservationError
from blockbudget.ledger import Ledger, Reservation

MP_BLOCKS = [f"mp/{i}" for i in range(10)]
MP_CONTEXTS = ["ops", "ml"]
MP_EPS = ["0.002", "0.005", "0.01", "0.02"]


def mp_worker(url: str, worker: int, ops: int, out: str) -> None:
    """Run ``ops`` ledger calls (direct charges, reserves, draws, releases) on random
    overlapping subsets of 10 blocks in 2 contexts; write every acknowledged charge to ``out``.
    """
    rng = random.Random(1000 + worker)
    ledger = Ledger(url)
    acked: list[dict[str, object]] = []
    refused = 0
    pending: list[Reservation] = []
    for i in range(ops):
        rid = f"w{worker}-{i}"
        roll = rng.random()
        ctx = rng.choice(MP_CONTEXTS)
        eps = rng.choice(MP_EPS)
        try:
            if roll < 0.4 or (0.65 <= roll < 0.85 and not pending):  # direct charge
                blocks = rng.sample(MP_BLOCKS, rng.randint(1, 4))
                ledger.charge(blocks, Budget(epsilon=eps), context=ctx, request_id=rid)
                acked.append({"id": rid, "blocks": blocks, "ctx": ctx, "eps": eps})
            elif roll < 0.65:  # reserve three times the draw size
                blocks = rng.sample(MP_BLOCKS, rng.randint(1, 4))
                big = Budget(epsilon=eps).scaled(3)
                pending.append(
                    ledger.reserve(blocks, big, context=ctx, request_id=rid, ttl_seconds=600)
                )
            elif roll < 0.85:  # draw on a subset of an open reservation
                res = rng.choice(pending)
                part = rng.sample(list(res.blocks), rng.randint(1, len(res.blocks)))
                ledger.charge(part, Budget(epsilon=eps), reservation_id=res.id, request_id=rid)
                acked.append({"id": rid, "blocks": part, "ctx": res.context, "eps": eps})
            elif pending:  # release
                ledger.release(pending.pop(rng.randrange(len(pending))).id, request_id=rid)
            else:
                ledger.expire_reservations()
        except (BudgetExceededError, ReservationError):
            refused += 1
    for res in pending:
        ledger.release(res.id)
    ledger.dispose()
    Path(out).write_text(json.dumps({"acked": acked, "refused": refused}))


def open_at_once(url: str, barrier: Barrier) -> None:
    """Wait until every sibling is ready, then open (and so create) the ledger at ``url``."""
    barrier.wait(timeout=120)
    Ledger(url).dispose()


def charge_loop(url: str, prefix: str) -> None:
    """Charge forever; print each request id only after the charge returned (acknowledged)."""
    ledger = Ledger(url)
    print("ready", flush=True)
    i = 0
    while True:
        rid = f"{prefix}-{i}"
        ledger.charge(["k/a", "k/b"], Budget(epsilon="0.0001"), request_id=rid)
        print(rid, flush=True)
        i += 1


def hold_reservation(url: str) -> None:
    """Reserve, print the reservation id, then hang until killed."""
    ledger = Ledger(url)
    res = ledger.reserve(["k/a", "k/b"], Budget(epsilon=0.5), holder="doomed", ttl_seconds=30)
    print(res.id, flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    mode, db_url = sys.argv[1], sys.argv[2]
    if mode == "charge-loop":
        charge_loop(db_url, sys.argv[3])
    elif mode == "hold":
        hold_reservation(db_url)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
