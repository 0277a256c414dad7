"""The offline optimum: seed 000's assignment problem Eq. (5), by MILP and by the paper's
Lagrangian-relaxation branch and bound (seed ``000_de3e86489c8646aa.txt`` §IV-B, §V).

Eq. (5):  max Σ_ij p_ij x_ij  s.t.  Σ_j ε_j x_ij ≤ ε_gi (each block i),
          Σ_i x_ij ≤ c_j (each query j),  x_ij ∈ {0, 1}.

* :func:`solve_milp` hands Eq. (5) to HiGHS through :func:`scipy.optimize.milp`.
* :func:`solve_branch_and_bound` is §V's algorithm: a binary tree over the x_ij (left branch 1,
  right 0), pruned by the bound of the Lagrangian relaxation Eq. (6) that dualizes the access
  limits with multipliers λ_j ≥ 0; Z(λ) splits into one 0-1 knapsack per block, Eq. (7), each
  solved exactly by a small branch and bound; λ is improved by subgradient (dual) steps
  (Park et al. 1998). The incumbent starts from the paper's heuristic: each query takes its top
  c_j blocks by significance while they fit.
* Advanced composition (§V, last paragraph): pass ``block_fits`` — an exact feasibility oracle
  for a set of queries on a block (e.g. the strong-composition filter) — together with linear
  ``weights``/``capacities`` that every feasible set satisfies (for strong composition:
  Σ ε_j² ≤ ε_g² / (2 log(1/δ̃)), a consequence of Rogers et al.'s bound); the relaxation then
  stays an upper bound and the oracle keeps solutions exact. :func:`strong_relaxation` builds it.

:class:`OfflineOptimum` is the scheduler form: it waits for the whole run, then solves one MILP
over every task — OPEN tasks as Eq. (5) with significance, NAMED tasks all-or-nothing with their
profit (the privacy knapsack of DPack §3), one linear constraint per feature of an ALL-shaped
rule's blocks, and for an ANY-shaped rule (RDP) one binary per order (the block is feasible if
*some* order is within capacity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from blockbudget.accounting import Combine
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import Scheduler, TaskShape, TaskSpec, check_positive
from blockbudget.scheduling.pool import FloatArray, Pool

__all__ = [
    "SCHEDULERS",
    "Assignment",
    "OfflineOptimum",
    "greedy_assignment",
    "solve_branch_and_bound",
    "solve_milp",
    "strong_relaxation",
]

BlockFits = Callable[[int, Sequence[int]], bool]


@dataclass(frozen=True)
class Assignment:
    """A solution of Eq. (5): x (m blocks × n queries, 0/1), its value, and search statistics.

    Attributes:
        x: the assignment matrix.
        value: Σ p_ij x_ij.
        optimal: whether the solver proved optimality.
        nodes: branch-and-bound nodes explored (0 for the MILP).
    """

    x: npt.NDArray[np.int8]
    value: float
    optimal: bool
    nodes: int = 0


def _check(
    p: FloatArray, eps: FloatArray, budgets: FloatArray, limits: npt.NDArray[np.int64]
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.int64]]:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2:
        raise InvalidRequestError(f"p must be an m × n matrix, got shape {p.shape}")
    m, n = p.shape
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (m, n)) if np.ndim(eps) else eps
    eps = np.asarray(np.broadcast_to(eps, (m, n)), dtype=np.float64)
    budgets = np.asarray(budgets, dtype=np.float64).reshape(m)
    limits = np.asarray(limits, dtype=np.int64).reshape(n)
    if np.any(p < 0) or np.any(eps <= 0) or np.any(budgets < 0) or np.any(limits < 0):
        raise InvalidRequestError("need p ≥ 0, ε > 0, budgets ≥ 0 and limits ≥ 0")
    return p, eps, budgets, limits


def solve_milp(
    p: FloatArray,
    eps: FloatArray,
    budgets: FloatArray,
    limits: npt.NDArray[np.int64],
    *,
    time_limit: float = 60.0,
) -> Assignment:
    """Eq. (5) with HiGHS (scipy.optimize.milp).

    Args:
        p: (m, n) significance p_ij.
        eps: (n,) costs ε_j, or (m, n) per pair.
        budgets: (m,) block budgets ε_gi.
        limits: (n,) access limits c_j.
        time_limit: seconds for HiGHS.
    """
    p, eps, budgets, limits = _check(p, eps, budgets, limits)
    m, n = p.shape
    k = np.arange(m * n).reshape(m, n)
    rows_b = np.repeat(np.arange(m), n)
    block_rows = coo_array((eps.ravel(), (rows_b, k.ravel())), shape=(m, m * n))
    rows_q = np.tile(np.arange(n), m)
    query_rows = coo_array((np.ones(m * n), (rows_q, k.ravel())), shape=(n, m * n))
    constraints = [
        LinearConstraint(block_rows.tocsr(), -np.inf, budgets),
        LinearConstraint(query_rows.tocsr(), -np.inf, limits.astype(np.float64)),
    ]
    res = milp(
        -p.ravel(),
        constraints=constraints,
        integrality=np.ones(m * n),
        bounds=Bounds(0, 1),
        options={"time_limit": time_limit, "mip_rel_gap": 1e-9},
    )
    if res.x is None:
        return Assignment(np.zeros((m, n), dtype=np.int8), 0.0, False)
    x = (np.asarray(res.x) > 0.5).astype(np.int8).reshape(m, n)
    return Assignment(x, float(np.sum(p * x)), bool(res.status == 0))


def greedy_assignment(
    p: FloatArray, eps: FloatArray, budgets: FloatArray, limits: npt.NDArray[np.int64]
) -> Assignment:
    """The paper's starting heuristic (§V): each query, in order, takes its top-c_j blocks by
    significance among those that still fit."""
    p, eps, budgets, limits = _check(p, eps, budgets, limits)
    m, n = p.shape
    left = budgets.astype(np.float64).copy()
    x = np.zeros((m, n), dtype=np.int8)
    for j in range(n):
        taken = 0
        for i in np.argsort(-p[:, j], kind="stable"):
            if taken >= limits[j] or p[i, j] <= 0:
                break
            if eps[i, j] <= left[i] + 1e-12:
                x[i, j] = 1
                left[i] -= eps[i, j]
                taken += 1
    return Assignment(x, float(np.sum(p * x)), False)


def _knapsack(values: FloatArray, weights: FloatArray, capacity: float) -> float:
    """Exact 0-1 knapsack optimum by depth-first branch and bound with Dantzig's bound."""
    keep = (values > 0) & (weights <= capacity + 1e-12)
    v, w = values[keep], weights[keep]
    if len(v) == 0:
        return 0.0
    order = np.argsort(-v / w, kind="stable")
    v, w = v[order], w[order]
    best = 0.0

    def bound(k: int, room: float, acc: float) -> float:
        for t in range(k, len(v)):
            if w[t] <= room:
                room -= float(w[t])
                acc += float(v[t])
            else:
                return acc + float(v[t]) * room / float(w[t])
        return acc

    def go(k: int, room: float, acc: float) -> None:
        nonlocal best
        if acc > best:
            best = acc
        if k == len(v) or bound(k, room, acc) <= best + 1e-12:
            return
        if w[k] <= room + 1e-12:
            go(k + 1, room - w[k], acc + v[k])
        go(k + 1, room, acc)

    go(0, capacity, 0.0)
    return best


def solve_branch_and_bound(
    p: FloatArray,
    eps: FloatArray,
    budgets: FloatArray,
    limits: npt.NDArray[np.int64],
    *,
    block_fits: BlockFits | None = None,
    dual_steps: int = 8,
    max_nodes: int = 200_000,
) -> Assignment:
    """Seed 000 §V: branch and bound with the Lagrangian bound of Eq. (6)–(7).

    Args:
        p, eps, budgets, limits: as for :func:`solve_milp`; ``eps``/``budgets`` are the linear
            relaxation used in the bound (and the exact rule when ``block_fits`` is None).
        block_fits: exact feasibility of a set of queries (indices) on block i (advanced
            composition); None means Σ_j ε_ij ≤ ε_gi.
        dual_steps: subgradient steps on λ per node.
        max_nodes: give up proving optimality after this many nodes.
    """
    p, eps, budgets, limits = _check(p, eps, budgets, limits)
    m, n = p.shape
    start = greedy_assignment(p, eps, budgets, limits)
    if block_fits is not None:  # the greedy start may break the exact rule: check it
        ok = all(block_fits(i, list(np.flatnonzero(start.x[i]))) for i in range(m))
        start = start if ok else Assignment(np.zeros((m, n), dtype=np.int8), 0.0, False)
    best_x = start.x.copy()
    best = start.value
    pairs = [(i, j) for i in range(m) for j in range(n) if p[i, j] > 0]
    pairs.sort(key=lambda ij: (-p[ij] / eps[ij], ij))
    x = np.zeros((m, n), dtype=np.int8)
    free = np.zeros((m, n), dtype=bool)
    for i, j in pairs:
        free[i, j] = True
    nodes = 0
    exhausted = False

    def upper(room: FloatArray, quota: npt.NDArray[np.int64], lam: FloatArray) -> float:
        bound = math.inf
        for _ in range(dual_steps):
            total = float(np.sum(lam * np.maximum(quota, 0)))
            counts = np.zeros(n)
            for i in range(m):
                cols = np.flatnonzero(free[i])
                if len(cols) == 0:
                    continue
                vals = p[i, cols] - lam[cols]
                pos = vals > 0
                cols, vals = cols[pos], vals[pos]
                if len(cols) == 0:
                    continue
                sub = _knapsack(vals, eps[i, cols], float(room[i]))
                total += sub
                # the fractional-free picks of the subproblem guide the subgradient
                order = np.argsort(-vals / eps[i, cols], kind="stable")
                r = float(room[i])
                for t in order:
                    if eps[i, cols[t]] <= r:
                        r -= eps[i, cols[t]]
                        counts[cols[t]] += 1
            bound = min(bound, total)
            grad = np.maximum(quota, 0) - counts
            lam = np.maximum(0.0, lam - 0.5 * grad / (1 + nodes % 7))
        return bound

    def search(k: int, room: FloatArray, quota: npt.NDArray[np.int64], acc: float) -> None:
        nonlocal best, best_x, nodes, exhausted
        nodes += 1
        if nodes > max_nodes:
            exhausted = True
            return
        if acc > best + 1e-12:
            best, best_x = acc, x.copy()
        if k == len(pairs):
            return
        if acc + upper(room, quota, np.zeros(n)) <= best + 1e-9:
            return
        i, j = pairs[k]
        free[i, j] = False
        if quota[j] > 0 and eps[i, j] <= room[i] + 1e-12:
            x[i, j] = 1
            fits = block_fits is None or block_fits(i, list(np.flatnonzero(x[i])))
            if fits:
                room[i] -= eps[i, j]
                quota[j] -= 1
                search(k + 1, room, quota, acc + p[i, j])
                room[i] += eps[i, j]
                quota[j] += 1
            x[i, j] = 0
        search(k + 1, room, quota, acc)
        free[i, j] = True

    search(0, budgets.copy(), limits.copy(), 0.0)
    return Assignment(best_x, float(np.sum(p * best_x)), not exhausted, nodes)


def strong_relaxation(
    eps: FloatArray, *, epsilon_g: float, slack_delta: float
) -> tuple[FloatArray, float]:
    """Linear necessary condition of strong adaptive composition for the B&B bound.

    Rogers et al. (2016) Thm 5.1 (seed 004 Thm A.2) admits a set of charges only if
    sqrt(2 Σε_i² · log(1/δ̃)) ≤ ε_g (the other terms are non-negative and the logarithmic factor
    is ≥ 1), i.e. Σ ε_i² ≤ ε_g² / (2 log(1/δ̃)). Returns (weights ε_i², capacity).
    """
    weights = np.asarray(eps, dtype=np.float64) ** 2
    return weights, epsilon_g**2 / (2.0 * math.log(1.0 / slack_delta))


class OfflineOptimum(Scheduler):
    """Waits for the whole run, then solves the offline problem exactly (see the module
    docstring). Not an online algorithm: it is the OPT of competitive ratios.

    Not private on its own: its choice of blocks reads the significance values p_ij exactly,
    with no AboveThreshold and no ε0 charged, so it may only be used as a benchmark (the OPT
    of seed 000 Eq. (5), Tab. II) or where p_ij is public (user-supplied or recency). The
    service queue refuses it (``exact``); the online schedulers of
    :mod:`blockbudget.scheduling.threshold` pay for every comparison.

    Args:
        time_limit: seconds for HiGHS (a safety net; results then depend on the machine).
        node_limit: branch-and-bound nodes for HiGHS (deterministic); ``optimal`` says whether
            optimality was proven within it.
    """

    name = "offline-optimum"
    exact = True
    shapes = frozenset({TaskShape.NAMED, TaskShape.OPEN})
    combines = frozenset({Combine.ALL, Combine.ANY})

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        time_limit: float = 600.0,
        node_limit: int = 20_000,
    ) -> None:
        super().__init__(seed=seed, noise=noise)
        self.time_limit = check_positive(time_limit, name="time_limit")
        node_limit = plain_number(node_limit)
        if isinstance(node_limit, bool) or not isinstance(node_limit, int) or node_limit < 1:
            raise InvalidRequestError(f"node_limit must be an int >= 1, got {node_limit!r}")
        self.node_limit = node_limit
        self.queue: list[TaskSpec] = []
        self.optimal: bool | None = None

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        self.queue.append(task)

    def on_finish(self, pool: Pool) -> None:
        tasks = [t for t in self.queue if pool.is_pending(t.task_id)]
        if not tasks:
            return
        chosen = self.solve(pool, tasks)
        for task, blocks in zip(tasks, chosen, strict=True):
            if not blocks:
                continue
            if not pool.grant(task.task_id, {b: task.demand for b in blocks}):
                pool.reject(task.task_id, note="numerical tolerance of the MILP")

    def solve(self, pool: Pool, tasks: list[TaskSpec]) -> list[list[str]]:
        """One MILP over every task; returns the blocks granted to each (empty: none)."""
        nb, dims = pool.n_blocks, pool.dims
        cap = pool.capacity - pool.charged - pool.reserved
        cols: list[tuple[int, int]] = []  # (task k, block i) pair variables
        obj: list[float] = []
        group: list[int] = []  # the grant variable g_k of each task
        n_g = len(tasks)
        for k, t in enumerate(tasks):
            blocks = (  # an OPEN task: the blocks it may use (all, unless it has `eligible`)
                pool.usable_indices(t.task_id).tolist()
                if t.blocks is None
                else [pool.index(b) for b in t.blocks]
            )
            for i in blocks:
                cols.append((k, i))
                obj.append(t.significance_of(pool.blocks[i].block_id) if t.blocks is None else 0.0)
            group.append(k)
        n_x = len(cols)
        rdp = pool.combine is Combine.ANY  # some feature within capacity: one binary each
        n_y = nb * dims if rdp else 0
        n_var = n_g + n_x + n_y
        c = np.zeros(n_var)
        c[n_g : n_g + n_x] = -np.array(obj)
        for k, t in enumerate(tasks):
            if t.blocks is not None:
                c[k] = -t.profit
        rows, cidx, vals, lo, hi = [], [], [], [], []
        r = 0
        x_of_task: dict[int, list[int]] = {}
        for v, (k, _i) in enumerate(cols):
            x_of_task.setdefault(k, []).append(n_g + v)
        for k, t in enumerate(tasks):
            xs = x_of_task.get(k, [])
            for xv in xs:  # x ≤ g (NAMED: x = g)
                rows += [r, r]
                cidx += [xv, k]
                vals += [1.0, -1.0]
                lo.append(0.0 if t.blocks is not None else -np.inf)
                hi.append(0.0)
                r += 1
            if t.blocks is None:
                rows += [r] * (len(xs) + 1)
                cidx += [*xs, k]
                vals += [1.0] * len(xs) + [-float(t.min_blocks)]
                lo.append(0.0)
                hi.append(np.inf)
                r += 1
                limit = t.access_limit
                if limit is not None:
                    rows += [r] * len(xs)
                    cidx += xs
                    vals += [1.0] * len(xs)
                    lo.append(-np.inf)
                    hi.append(float(limit))
                    r += 1
        vec = {k: pool.vector(t.demand) for k, t in enumerate(tasks)}
        # big-M per (block, order): the most the tasks could ever put there beyond capacity
        for i in range(nb):
            on_block = [(n_g + v, k) for v, (k, bi) in enumerate(cols) if bi == i]
            if not on_block:
                continue
            for d in range(dims):
                limit_d = float(cap[i, d]) * (1 - 1e-5)  # HiGHS feasibility tolerance
                if rdp and pool.capacity[i, d] <= 0:
                    continue
                rows += [r] * len(on_block)
                cidx += [xv for xv, _ in on_block]
                vals += [float(vec[k][d]) for _, k in on_block]
                if rdp:  # Σ d x ≤ cap + M(1 − y)
                    big = max(0.0, sum(float(vec[k][d]) for _, k in on_block) - limit_d) + 1.0
                    rows.append(r)
                    cidx.append(n_g + n_x + i * dims + d)
                    vals.append(big)
                    hi.append(limit_d + big)
                else:
                    hi.append(limit_d)
                lo.append(-np.inf)
                r += 1
            if rdp:
                usable = [d for d in range(dims) if pool.capacity[i, d] > 0]
                rows += [r] * len(usable)
                cidx += [n_g + n_x + i * dims + d for d in usable]
                vals += [1.0] * len(usable)
                lo.append(1.0)
                hi.append(np.inf)
                r += 1
        a = coo_array((vals, (rows, cidx)), shape=(r, n_var)).tocsr()
        res = milp(
            c,
            constraints=[LinearConstraint(a, np.array(lo), np.array(hi))],
            integrality=np.ones(n_var),
            bounds=Bounds(0, 1),
            options={"time_limit": self.time_limit, "node_limit": self.node_limit},
        )
        self.optimal = bool(res.status == 0)
        out: list[list[str]] = [[] for _ in tasks]
        if res.x is None:
            return out
        sol = np.asarray(res.x) > 0.5
        for v, (k, i) in enumerate(cols):
            if sol[k] and sol[n_g + v]:
                out[k].append(pool.blocks[i].block_id)
        return out

    def describe(self) -> str:
        return "offline-optimum(MILP, HiGHS)"


SCHEDULERS: tuple[type[Scheduler], ...] = (OfflineOptimum,)
