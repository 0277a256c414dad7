"""Sage's allocation of fresh block budget across concurrent pipelines (seed 004 §3.3, §5.4).

Seed ``004_2b5d216070ae2ded.txt`` §3.3 ("Privacy-Adaptive Training") and §5.4 ("Multi-pipeline
Workload Performance"); seed ``001_7d2967ad64403faa.txt`` §3.4 and §4.4:

* Every time a block arrives, its budget is divided **evenly** among the pipelines waiting at
  that moment, as reservations ("allocated" budget). When a pipeline is ACCEPTed, what it still
  holds is reallocated evenly among the pipelines still waiting.
* **Block/Conserve** (Sage): a pipeline first runs at a small ε0 on a minimum window of blocks;
  on RETRY it doubles ε when its allocation on the window allows, otherwise it doubles its
  window by waiting for new blocks (privacy-adaptive training; the budget search then costs at
  most 4× the accepted iteration's budget, see :mod:`blockbudget.training.adaptive`).
* **Block/Aggressive**: the same allocation, but each run spends all the budget the pipeline
  holds on its window.
* **Query composition** (§3.2, second alternative): the same allocation as Block/Conserve, but
  the pipeline cannot combine blocks — it runs one DP query per block and aggregates, so it
  needs more data for the same quality (its profile's ``partitioned`` sample complexity, Fig. 7).
* **Streaming composition** (§3.2, third alternative): each arriving block goes whole to one
  waiting pipeline (the oldest still collecting data), which spends its full budget on it; a
  block is never shared.

They are written against the one :class:`~blockbudget.scheduling.base.Scheduler` interface and
act only through the checked :class:`~blockbudget.scheduling.pool.Pool`. Sage pipelines are
OPEN tasks: ``demand`` is the most a pipeline may spend on one block over all its iterations
(Sage's ε upper bound, 1 in §5), ``max_blocks`` its largest window.

Adapter (what the interface does not carry): the quality of a pipeline run depends on the ε it
used and on how much data it read, which ``TaskSpec.validator`` (called with the blocks charged
so far) cannot express. The strategies therefore take an optional ``profiles`` mapping of task
id → :class:`PipelineProfile` whose ``outcome(epsilon_fraction=, blocks=, partitioned=)`` gives
the SLAed validator's decision. Without a profile a task falls back to ``TaskSpec.validator``
(True = ACCEPT) and, without one, is ACCEPTed after its first run.

Live pipelines (asynchronous outcomes). In a simulation the outcome is known at once; on a live
platform a run is one real training iteration that takes time. A profile may therefore return
``None`` ("the run is executing"): the strategy records the run as started (a
:class:`RunRequest`: the task, its iteration, ε fraction, window and the cost charged on each
block), does not start another run for that pipeline, and keeps its reservations (it still gets
its even split of new blocks). The driver reads the run with :meth:`SageStrategy.started` (or
receives it through ``on_run``), turns its CHARGE decisions into one ledger reservation, runs the
iteration on it, and calls :meth:`SageStrategy.report` with the validator's
:class:`~blockbudget.outcome.Outcome`; the strategy resumes exactly where a
synchronous outcome would have taken it (ACCEPT: grant and reallocate what the pipeline held;
REJECT: reject; RETRY: double ε if the allocation allows, else the window, and go on).

Eligibility: a pipeline with :attr:`TaskSpec.eligible` (a selector's blocks) takes part only in
the even split of blocks it may use; the split is among the waiting pipelines that may use the
block, and so is a released reservation's reallocation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import ClassVar, Protocol

import numpy as np

from blockbudget.accounting import Combine
from blockbudget.budget import Cost
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.outcome import Outcome
from blockbudget.scheduling.base import BlockSpec, Scheduler, TaskShape, TaskSpec
from blockbudget.scheduling.budgets import capped_cost
from blockbudget.scheduling.pool import Pool

#: Relative tolerance when comparing a cost with a reservation (the pool keeps a 1e-9 capacity
#: margin, so an even share of a whole block is a hair below the block; the pool still checks
#: every charge exactly).
_TOL = 1e-6
#: Charges are this fraction of their nominal share, so that runs adding up to a whole block's
#: capacity still fit the pool's conservatively rounded (upward) float bookkeeping.
_SCALE = 1.0 - 1e-6


class PipelineProfile(Protocol):
    """How a pipeline's SLAed validation turns out for a given budget and amount of data."""

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> Outcome | None:
        """The validator's decision for a run at ``epsilon_fraction`` × the task's demand on
        ``blocks`` blocks; ``partitioned`` when each block is queried separately. None: the run
        is executing and its outcome comes later through :meth:`SageStrategy.report`."""
        ...


@dataclass(frozen=True)
class RunRequest:
    """One privacy-adaptive run the strategy started (what a live driver executes).

    The pool holds the run's CHARGE decisions (``cost`` on each of ``blocks``, note
    ``"run <iteration>"``); a live driver turns them into one ledger reservation — the run's
    grant — and trains one iteration on it.

    Attributes:
        task_id: the pipeline.
        iteration: the pipeline's run number, from 0.
        fraction: ε of the run as a fraction of the task's demand (2**-levels, doubling).
        blocks: the window, oldest block first.
        cost: what the run was charged on each block (``demand.scaled(fraction)``, a hair less).
        partitioned: whether each block is queried separately (Query composition).

    Example:
        >>> from blockbudget.budget import Budget
        >>> run = RunRequest("p", 0, 0.0625, ("b0",), Budget(epsilon=0.0625), False)
        >>> run.blocks, run.iteration
        (('b0',), 0)
    """

    task_id: str
    iteration: int
    fraction: float
    blocks: tuple[str, ...]
    cost: Cost
    partitioned: bool


class Usage(Enum):
    """How a pipeline uses the budget allocated to it."""

    CONSERVE = "conserve"
    AGGRESSIVE = "aggressive"
    STREAMING = "streaming"


@dataclass
class _State:
    """Per-pipeline search state (privacy-adaptive training, seed 004 §3.3)."""

    level: int
    window: int
    spent: dict[str, float] = field(default_factory=dict)  # block id -> fraction of demand
    runs: int = 0


class SageStrategy(Scheduler):
    """Base of the four §5.4 strategies (not registered itself).

    Args:
        seed: seed of ``self.rng`` (unused: the strategies are deterministic); None: OS entropy.
        noise: unused (no DP decision is made by the allocation itself).
        profiles: task id → :class:`PipelineProfile` (see the module docstring).
        levels: ε0 = demand / 2**levels for Block/Conserve and Query composition.
        min_window: the minimum window, in blocks.
        on_run: called with each run whose outcome is pending (its profile returned None),
            right after the run was charged; a live driver's hook (or poll :meth:`started`).
    """

    usage: ClassVar[Usage] = Usage.CONSERVE
    partitioned: ClassVar[bool] = False
    shapes = frozenset({TaskShape.OPEN})
    combines = frozenset({Combine.ALL, Combine.ANY})

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        profiles: Mapping[str, PipelineProfile] | None = None,
        levels: int = 4,
        min_window: int = 1,
        on_run: Callable[[RunRequest], None] | None = None,
    ) -> None:
        super().__init__(seed=seed, noise=noise)
        levels = plain_number(levels)
        if isinstance(levels, bool) or not isinstance(levels, int) or not 0 <= levels <= 30:
            raise InvalidRequestError(f"levels must be an int in [0, 30], got {levels!r}")
        min_window = plain_number(min_window)
        if isinstance(min_window, bool) or not isinstance(min_window, int) or min_window < 1:
            raise InvalidRequestError(f"min_window must be an int >= 1, got {min_window!r}")
        self.profiles = dict(profiles or {})
        self.levels = levels
        self.min_window = min_window
        self.waiting: list[str] = []
        self.state: dict[str, _State] = {}
        self.on_run = on_run
        self._running: dict[str, RunRequest] = {}

    def describe(self) -> str:
        return f"{self.name}(levels={self.levels}, min_window={self.min_window})"

    # --- events -------------------------------------------------------------------------------

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        # Privacy-adaptive search starts at ε0 = demand / 2**levels only for a task that can
        # say whether a run was good enough (a profile or a validator). A task with neither
        # (a live DP query or budget demand) has nothing to adapt to: it would be ACCEPTed
        # after its first run, at 1/2**levels of what it asked for, so it is served its
        # whole demand instead.
        adaptive = task.task_id in self.profiles or task.validator is not None
        start = 0 if self.usage is Usage.CONSERVE and adaptive else self.levels
        # a window never below the task's own minimum (a selector's k blocks: min = max = k)
        window = max(self.min_window, task.min_blocks)
        self.state[task.task_id] = _State(level=start, window=window)
        self.waiting.append(task.task_id)
        if task.eligible is not None:  # bound to blocks that may all be here already
            self._offer_unallocated(pool, task.task_id)
            self._run(pool, task.task_id)

    def _offer_unallocated(self, pool: Pool, task_id: str) -> None:
        """A pipeline bound to a selector's blocks cannot wait for fresh ones: it gets a share
        of what is still unallocated on its blocks that are already here — an even split among
        the waiting pipelines that may use the block (Streaming composition: a whole block
        nobody holds, up to its window). Unrestricted pipelines keep Sage's rule (fresh blocks
        only)."""
        idx = pool.usable_indices(task_id)
        if not len(idx):
            return
        free = 1.0 - pool.used_fraction(idx)
        smallest = 2.0 ** -(self.levels + 4)
        window = self.state[task_id].window
        for i, left in zip(idx.tolist(), free.tolist(), strict=True):
            block_id = pool.blocks[i].block_id
            if self.usage is Usage.STREAMING:
                if left >= 1.0 - 1e-9 and len(pool.held(task_id)) < window:
                    self._reserve(pool, task_id, block_id, pool.capacity_share(block_id, 1.0))
                continue
            if left <= smallest:
                continue
            takers = sum(1 for t in self.waiting if pool.eligible(t, block_id))
            share = left * (1 - 1e-6) / takers
            self._reserve(pool, task_id, block_id, pool.capacity_share(block_id, share))

    def on_block(self, pool: Pool, block: BlockSpec) -> None:
        self._prune(pool)
        if self.usage is Usage.STREAMING:
            self._stream_block(pool, block)
        else:
            takers = [t for t in self.waiting if pool.eligible(t, block.block_id)]
            if takers:
                cost = pool.capacity_share(block.block_id, 1.0 / len(takers))
                for tid in takers:
                    self._reserve(pool, tid, block.block_id, cost)
        self._run_all(pool)

    def on_tick(self, pool: Pool) -> None:
        self._prune(pool)
        self._run_all(pool)

    # --- allocation ---------------------------------------------------------------------------

    def _prune(self, pool: Pool) -> None:
        self.waiting = [t for t in self.waiting if pool.is_pending(t)]
        for tid in [t for t in self._running if not pool.is_pending(t)]:
            del self._running[tid]  # cancelled or expired while its run executed

    # --- live runs ----------------------------------------------------------------------------

    def started(self, task_id: str) -> RunRequest | None:
        """The run of ``task_id`` whose outcome is pending, or None."""
        return self._running.get(task_id)

    def running(self) -> tuple[RunRequest, ...]:
        """Every run whose outcome is pending, in the order they started."""
        return tuple(self._running.values())

    def report(self, pool: Pool, task_id: str, outcome: Outcome) -> bool:
        """The outcome of a pipeline's pending run: resume where a synchronous outcome would
        have gone (ACCEPT: grant and reallocate; REJECT: reject; RETRY: double ε if the
        allocation allows, else the window, and run again), then give every waiting pipeline
        its turn (a grant's reallocation may let them run).

        Returns:
            True when the outcome was applied; False when the task is no longer waiting (it was
            cancelled or expired while its run executed; the run is forgotten).

        Raises:
            InvalidRequestError: ``outcome`` is not an Outcome, the task was never submitted, or
                it waits with no run pending.

        Example:
            >>> from blockbudget.accounting import Accounting
            >>> from blockbudget.budget import Budget
            >>> from blockbudget.scheduling import BlockSpec, Pool, TaskSpec
            >>> class Live:  # a live pipeline: every run executes elsewhere
            ...     def outcome(self, *, epsilon_fraction, blocks, partitioned):
            ...         return None
            >>> sage = BlockConserve(profiles={"p": Live()}, levels=2)
            >>> pool = Pool(Accounting.BASIC)
            >>> pool.submit(TaskSpec("p", 0.0, Budget(epsilon=1.0)))
            >>> sage.on_task(pool, pool.tasks["p"])
            >>> _ = pool.add_block(BlockSpec("b0", 0.0, Budget(epsilon=1.0)))
            >>> sage.on_block(pool, pool.blocks[0])
            >>> run = sage.started("p")
            >>> run.iteration, run.fraction, run.blocks
            (0, 0.25, ('b0',))
            >>> sage.report(pool, "p", Outcome.RETRY)  # ε doubles on the same block
            True
            >>> sage.started("p").fraction
            0.5
            >>> sage.report(pool, "p", Outcome.ACCEPT), pool.status["p"].value
            (True, 'granted')
        """
        if not isinstance(outcome, Outcome):
            raise InvalidRequestError(f"outcome must be an Outcome, got {outcome!r}")
        if task_id not in pool.tasks:
            raise InvalidRequestError(f"task {task_id!r} was never submitted")
        run = self._running.pop(task_id, None)
        if not pool.is_pending(task_id):
            return False
        if run is None:
            raise InvalidRequestError(f"task {task_id!r} has no run in progress to report on")
        if self._conclude(pool, run, outcome):
            self._run(pool, task_id)
        self._prune(pool)
        self._run_all(pool)
        return True

    def _reserve(self, pool: Pool, task_id: str, block_id: str, cost: Cost) -> None:
        """Add ``cost`` to a pipeline's reservation on a block, as one exact reservation (an
        existing one is released and re-reserved with the exact sum), never above its demand."""
        demand = pool.tasks[task_id].demand
        held = pool.held_cost(task_id, block_id)
        if held is not None and type(held) is not type(cost):
            return
        # the kind's own composition (its features add), exact when the digits allow, else
        # rounded up (a reservation may round up: the pool checks it against the filter)
        total = cost if held is None else held.add_up(cost)
        # never hold more than the pipeline may spend on a block, feature by feature (a share a
        # hair below the demand's δ must not keep a whole block's ε): both read in the rule's
        # kind (a pure budget as its price), then their meet
        total = capped_cost(total, demand, pool)
        if held is not None:
            pool.release(task_id, block_id, note="merged into a larger reservation")
        if not pool.reserve(task_id, block_id, total, note="sage even split") and held is not None:
            pool.reserve(task_id, block_id, held, note="restored")

    def _stream_block(self, pool: Pool, block: BlockSpec) -> None:
        for tid in self.waiting:
            if not pool.eligible(tid, block.block_id):
                continue
            st = self.state[tid]
            held = [b for b in pool.held(tid) if b not in st.spent]
            if len(held) < st.window:
                self._reserve(pool, tid, block.block_id, pool.capacity_share(block.block_id, 1.0))
                return

    def _reallocate(self, pool: Pool, released: Mapping[str, Cost]) -> None:
        """Split what an ACCEPTed pipeline held evenly among the waiting ones. A share too small
        for any run (below 1/16 of ε0) stays unallocated instead."""
        self._prune(pool)
        if not self.waiting or self.usage is Usage.STREAMING:
            return
        smallest = 2.0 ** -(self.levels + 4)
        for block_id, cost in released.items():
            takers = [t for t in self.waiting if pool.eligible(t, block_id)]
            if not takers:
                continue
            part = cost.scaled(Decimal(1) / Decimal(len(takers)))
            if part.is_zero:
                continue
            vec = pool.vector(part)
            by_demand: dict[Cost, list[str]] = {}
            for tid in takers:
                by_demand.setdefault(pool.tasks[tid].demand, []).append(tid)
            for demand, tids in by_demand.items():
                if self._covers(pool, vec, pool.vector(demand) * smallest):
                    for tid in tids:
                        self._reserve(pool, tid, block_id, part)

    # --- privacy-adaptive runs ----------------------------------------------------------------

    def _run_all(self, pool: Pool) -> None:
        for tid in list(self.waiting):
            if pool.is_pending(tid):
                self._run(pool, tid)

    def _fraction(self, st: _State) -> float:
        return float(2.0 ** (st.level - self.levels))

    def _covers(self, pool: Pool, held: np.ndarray, need: np.ndarray) -> bool:
        """Whether a reservation covers a need, by the shape of the rule's fit test: on every
        feature (ALL), on some feature (ANY: a curve fits a block when some order stays within
        capacity)."""
        ok = held * (1 + _TOL) + 1e-18 >= need
        return bool(np.any(ok) if pool.combine is Combine.ANY else np.all(ok))

    def _usable(self, pool: Pool, task_id: str, fraction: float) -> list[str]:
        """Blocks where the pipeline holds at least ``fraction`` of its demand and may still
        spend it, oldest first (one vectorized test over all its reservations)."""
        held = pool.held(task_id)
        if not held:
            return []
        demand = pool.vector(pool.tasks[task_id].demand)
        st = self.state[task_id]
        ids = list(held)
        matrix = np.stack([held[b] for b in ids])
        spent = np.array([st.spent.get(b, 0.0) for b in ids])
        covered = matrix * (1 + _TOL) + 1e-18 >= demand * fraction
        rows = covered.any(axis=1) if pool.combine is Combine.ANY else covered.all(axis=1)
        ok = rows & (spent + fraction <= 1.0 + _TOL)
        return sorted((b for b, good in zip(ids, ok.tolist(), strict=True) if good), key=pool.index)

    def _aggressive_fraction(self, pool: Pool, task_id: str, blocks: list[str]) -> float:
        demand = pool.vector(pool.tasks[task_id].demand)
        st = self.state[task_id]
        held = pool.held(task_id)
        best = 1.0
        mask = demand > 0
        for b in blocks:
            ratios = held[b][mask] / demand[mask]
            ratio = float(np.max(ratios) if pool.combine is Combine.ANY else np.min(ratios))
            best = min(best, ratio * (1 - 1e-6), 1.0 - st.spent.get(b, 0.0))
        return max(best, 0.0)

    def _charge(self, pool: Pool, task_id: str, blocks: list[str], cost: Cost, note: str) -> bool:
        """Charge ``cost`` on ``blocks`` and keep the rest of the pipeline's reservation there
        reserved for it (the pool releases a whole reservation when it charges)."""
        before = {b: pool.held_cost(task_id, b) for b in blocks}
        if not pool.charge(task_id, {b: cost for b in blocks}, note=note):
            return False
        for b, held in before.items():
            rest = _remainder(held, cost)
            if rest is not None and pool.is_pending(task_id):
                pool.reserve(task_id, b, rest, note="remainder kept")
        return True

    def _evaluate(self, pool: Pool, task: TaskSpec, run: RunRequest) -> Outcome | None:
        profile = self.profiles.get(task.task_id)
        if profile is not None:
            return profile.outcome(
                epsilon_fraction=run.fraction, blocks=len(run.blocks), partitioned=run.partitioned
            )
        if task.validator is not None:
            ok = task.validator(tuple(pool.charged_blocks[task.task_id]))
            return Outcome.ACCEPT if ok else Outcome.RETRY
        return Outcome.ACCEPT

    def _run(self, pool: Pool, task_id: str) -> None:
        """Runs of one pipeline until it is decided, waits for blocks, or has a run executing."""
        task = pool.tasks[task_id]
        while pool.is_pending(task_id) and task_id not in self._running:
            run = self._start(pool, task_id)
            if run is None:
                return
            outcome = self._evaluate(pool, task, run)
            if outcome is None:  # executing (a live pipeline): report() resumes it
                self._running[task_id] = run
                if self.on_run is not None:
                    self.on_run(run)
                return
            if not self._conclude(pool, run, outcome):
                return

    def _start(self, pool: Pool, task_id: str) -> RunRequest | None:
        """First half of a run: choose the window and ε, charge them. None when the pipeline
        waits for blocks or was rejected (its window outgrew ``max_blocks``)."""
        task = pool.tasks[task_id]
        st = self.state[task_id]
        limit = task.access_limit
        if task.eligible is not None:  # never more blocks than it may use
            limit = min(len(task.eligible), limit or len(task.eligible))
        if limit is not None and st.window > limit:
            pool.reject(task_id, note=f"window of {st.window} blocks exceeds its {limit} blocks")
            return None
        if self.usage is not Usage.CONSERVE:
            candidates = self._usable(pool, task_id, 2.0**-self.levels)
            chosen = candidates[-st.window :]
            fraction = self._aggressive_fraction(pool, task_id, chosen) if chosen else 0.0
        else:
            fraction = self._fraction(st)
            chosen = self._usable(pool, task_id, fraction)[-st.window :]
        if len(chosen) < st.window or fraction <= 0:
            return None  # wait for more blocks
        if limit is not None and len(set(pool.charged_blocks[task_id]) | set(chosen)) > limit:
            pool.reject(task_id, note="the next window would exceed max_blocks")
            return None
        cost = task.demand.scaled(fraction * _SCALE)
        if not self._charge(pool, task_id, chosen, cost, f"run {st.runs}"):
            return None
        for b in chosen:
            st.spent[b] = st.spent.get(b, 0.0) + fraction
        run = RunRequest(task_id, st.runs, fraction, tuple(chosen), cost, self.partitioned)
        st.runs += 1
        return run

    def _conclude(self, pool: Pool, run: RunRequest, outcome: Outcome) -> bool:
        """Second half of a run: apply its outcome. True when the pipeline goes on (RETRY)."""
        task_id = run.task_id
        st = self.state[task_id]
        if outcome is Outcome.ACCEPT:
            released = {b: c for b in pool.held(task_id) if (c := pool.held_cost(task_id, b))}
            pool.grant(task_id, note=f"accepted after {st.runs} run(s)")
            self._reallocate(pool, released)
            return False
        if outcome is Outcome.REJECT:
            pool.reject(task_id, note="validator rejected")
            return False
        if self.usage is Usage.CONSERVE and st.level < self.levels:
            doubled = self._usable(pool, task_id, 2.0 * run.fraction)
            if len(doubled) >= st.window and all(b in doubled for b in run.blocks):
                st.level += 1
                return True
        st.window *= 2
        return True


def _remainder(held: Cost | None, cost: Cost) -> Cost | None:
    """What is left of a reservation after spending ``cost`` from it (None if nothing)."""
    if held is None or type(held) is not type(cost):
        return None
    rest = held.minus(cost)
    return None if rest is None or rest.is_zero else rest


class BlockConserve(SageStrategy):
    """Block/Conserve (Sage): even split of each new block, privacy-adaptive ε and data."""

    name = "sage-block-conserve"
    usage = Usage.CONSERVE


class BlockAggressive(SageStrategy):
    """Block/Aggressive: even split of each new block, each run spends all it holds."""

    name = "sage-block-aggressive"
    usage = Usage.AGGRESSIVE


class QueryComposition(SageStrategy):
    """Query composition: Block/Conserve's allocation with per-block (partitioned) queries."""

    name = "sage-query-composition"
    usage = Usage.CONSERVE
    partitioned = True


class StreamingComposition(SageStrategy):
    """Streaming composition: each block goes whole to one waiting pipeline."""

    name = "sage-streaming-composition"
    usage = Usage.STREAMING


SCHEDULERS: tuple[type[Scheduler], ...] = (
    BlockConserve,
    BlockAggressive,
    QueryComposition,
    StreamingComposition,
)
