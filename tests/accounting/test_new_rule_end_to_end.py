"""A rule defined outside the package, in one module, works end to end with no other edit.

The claim of docs/extending.md, checked in a fresh interpreter (so the registry of the other
tests never sees the toy rule): a pure-ε rule — its filter, its rule and ``register_rule`` in one
module — serves a stream created through the platform, a DP query priced and charged under it, a
refusal when spent, the audit log's replay, and the live task pool.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TOY_RULE = '''
"""A toy rule in one module: pure ε-DP basic composition (Σε ≤ ε_g; δ > 0 refused)."""
from collections.abc import Sequence

from blockbudget.accounting.basic import BudgetRule
from blockbudget.accounting.filters import Filter, Vector
from blockbudget.accounting.rule import Accounting, Combine, register_rule
from blockbudget.budget import Budget, Cost, units_down, units_up
from blockbudget.errors import InvalidBudgetError


class PureFilter(Filter):
    accounting = Accounting.declare("toy-pure")
    dims = 1

    def __init__(self, *, capacity: Budget) -> None:
        super().__init__(capacity=capacity)
        self._cap = units_down(capacity.epsilon)

    def features(self, cost: Cost) -> Vector:
        if not isinstance(cost, Budget) or not cost.is_pure:
            raise InvalidBudgetError(f"toy-pure accounts pure (ε, 0) budgets, not {cost}")
        return (units_up(cost.epsilon),)

    def fits(self, used: Sequence[int]) -> bool:
        return used[0] <= self._cap

    def remaining_fraction(self, used: Sequence[int]) -> float:
        return max(0.0, (self._cap - used[0]) / self._cap) if self._cap else 0.0

    def describe_remaining(self, used: Sequence[int]) -> str:
        return f"ε {(self._cap - used[0]) / 10**18:g}"

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        return f"ε {max(0, used[0] + candidate[0] - self._cap) / 10**18:g}"

    def capacity_units(self) -> Vector:
        return (self._cap,)

    def share(self, fraction: float) -> Cost:
        return Budget(epsilon=float(self.capacity.epsilon) * fraction)


class PureRule(BudgetRule):
    name = "toy-pure"
    title = "toy: pure ε-DP basic composition, Σε ≤ ε_g"
    combine = Combine.ALL

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return PureFilter(capacity=capacity)

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        return {"epsilon": str(features[0] / 10**18)}


RULE = register_rule(PureRule())
'''

SCRIPT = """
import sys, tempfile
from decimal import Decimal
import pandas as pd
sys.path.insert(0, sys.argv[1])
import toy_rule  # the one module: defines and registers the rule

from blockbudget import Blocking, Budget, Last, Platform, Query, run
from blockbudget.accounting import Accounting, rule_names
from blockbudget.errors import BudgetExceededError, NothingAffordableError
from blockbudget.ledger import Ledger
from blockbudget.scheduling import get_scheduler
from blockbudget.tasks.livepool import LivePool

assert "toy-pure" in rule_names()
p = Platform(tempfile.mkdtemp(), engine="arrow")
p.add_context("team")
p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"),
                accounting="toy-pure")
p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=48, freq="h"),
                            "v": [1.0] * 48}))
q = Query.count(epsilon=0.4)
a = run(p, "s", q, blocks=Last(2), context="team")
assert a.cost == Budget(epsilon="0.4"), a.cost
run(p, "s", q, blocks=Last(2), context="team")
try:
    run(p, "s", q, blocks=Last(2), context="team")  # 1.2 > 1: refused
    raise SystemExit("a third charge of 0.4 fitted")
except (BudgetExceededError, NothingAffordableError):
    pass
report = p.verify()
assert report.ok, report
states = {s.block: s for s in p.ledger.states("s", "team")}
assert sorted(s.used[0] for s in states.values()) == [8 * 10**17, 8 * 10**17]
live = LivePool(p.ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
for block, state in states.items():
    assert live.pool.exact_used(block) == tuple(state.used), block
print("ok", Accounting("toy-pure").rule.title)
p.close()
"""


def test_a_rule_in_one_module_serves_streams_queries_audit_and_the_live_pool(
    tmp_path: Path,
) -> None:
    (tmp_path / "toy_rule.py").write_text(textwrap.dedent(TOY_RULE), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok toy: pure ε-DP basic composition" in done.stdout
