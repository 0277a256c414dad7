"""Run by test_group_commit_crash: charge from many threads through a group-committing ledger
and print each request id the moment its charge is acknowledged (the parent kills us -9)."""

from __future__ import annotations

import itertools
import sys
import threading

from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError
from blockbudget.ledger import Ledger


def main() -> None:
    url = sys.argv[1]
    led = Ledger(url, group_commit=True)
    out = threading.Lock()

    def work(i: int) -> None:
        rid = f"k{i}"
        try:
            led.charge([f"b{i % 4}", f"b{(i + 1) % 4}"], Budget(epsilon="0.001"), request_id=rid)
        except BudgetExceededError:
            return
        with out:
            sys.stdout.write(rid + "\n")
            sys.stdout.flush()

    def loop(t: int) -> None:
        for j in itertools.count():
            work(j * 16 + t)

    threads = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


if __name__ == "__main__":
    main()
