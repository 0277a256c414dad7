"""Privacy-adaptive training: retry on more budget or more data until the validator decides.

Seed ``004_2b5d216070ae2ded.txt`` §3.3 ("Privacy-Adaptive Training"; seed
``001_7d2967ad64403faa.txt`` §3.4 "Iterative Training"): a pipeline first trains and validates
with a small (ε0, δ0) on a minimum window of blocks. On RETRY it is run again with **double the
ε** when its allocation allows, otherwise with **double the data** by waiting for new blocks of
the stream. ACCEPT releases the model, REJECT ends the search, and so does a timeout.

Budget bound (§3.3). Each retry doubles the resources of the run — ε or the window — so, writing
r_i = ε_i·w_i for iteration i (w_i its window in blocks), Σ_{i<k} r_i = r_k − r_0 < r_k for the
accepted iteration k, and the whole search uses less than 2·r_k; as r_k overshoots the best
possible by at most 2 (the run with half of it said RETRY), at most 4× the best. This is checked
on every run (:meth:`AdaptiveSearch.check_bound`). Per block, the ε charged by the search is also
below 2·ε_k as long as only ε doubles; each data doubling re-reads the old blocks at the same ε,
so a block's total can grow by ε_k per data doubling — the paper's "resources" are ε × data.

Confidence over iterations. The decisions of all iterations must hold together: iteration i
(1-based) validates at η_i = η/(i(i+1)), so Σ η_i < η (the schedule PrivateKube's
``non_adaptive_profile`` uses for the same purpose).

:class:`AdaptiveSearch` is the pure state machine; :func:`run_iteration` runs one iteration on
a grant it is given (a scheduler's, or its own) through an
:class:`~blockbudget.training.executors.Executor`; :class:`AdaptiveTrainer` drives the search
on a :class:`~blockbudget.platform.Platform`: it requests a grant on the window, runs
:func:`run_iteration` on it, and closes the grant (releasing what the run did not draw).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget, Cost, Number
from blockbudget.decimals import plain_fields
from blockbudget.errors import BudgetExceededError, InternalError, InvalidRequestError
from blockbudget.grant import group_cost
from blockbudget.mechanisms.calibration import exact_delta, exact_epsilon
from blockbudget.outcome import Outcome
from blockbudget.training.bounds import check_probability
from blockbudget.training.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.grant import Grant
    from blockbudget.platform import Platform
    from blockbudget.training.executors import Executor
    from blockbudget.training.pipeline import Pipeline, PipelineRun


class Status(Enum):
    """Where a privacy-adaptive search stands."""

    RUNNING = "running"  # it can run another iteration now
    WAITING = "waiting"  # it needs more blocks (or budget) than the stream has now
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"


TERMINAL = frozenset({Status.ACCEPTED, Status.REJECTED, Status.TIMED_OUT})


@dataclass(frozen=True)
class AdaptiveConfig:
    """Parameters of the search (seed 004 §3.3, §5: ε ≤ 1, δ = 1e-6, η = 0.05).

    Attributes:
        epsilon0: ε of the first iteration.
        delta: δ of every iteration (δ0).
        max_epsilon: the largest ε one iteration may use (Sage's upper bound).
        min_window: the first window, in blocks.
        eta: η: every decision of the search holds together with probability ≥ 1 − η.
        max_iterations: the timeout, in iterations.
        max_window: the largest window, in blocks (None: unbounded).
    """

    epsilon0: Number = Decimal("0.0625")
    delta: Number = Decimal("1e-6")
    max_epsilon: Number = Decimal(1)
    min_window: int = 1
    eta: float = 0.05
    max_iterations: int = 20
    max_window: int | None = None

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        eps0 = exact_epsilon(self.epsilon0)
        top = exact_epsilon(self.max_epsilon, name="max_epsilon")
        if eps0 > top:
            raise InvalidRequestError(f"epsilon0 {eps0} exceeds max_epsilon {top}")
        exact_delta(self.delta, positive=False)
        check_probability(self.eta, name="eta")
        for name in ("min_window", "max_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_window is not None:
            check_int(self.max_window, name="max_window", low=self.min_window)


@dataclass(frozen=True)
class Attempt:
    """One iteration of the search.

    Attributes:
        iteration: 1-based.
        epsilon, delta: its budget.
        blocks: the block ids it read.
        eta: the confidence it validated at (η/(i(i+1))).
        outcome: the validator's decision.
        bound: the validator's ACCEPT bound.
    """

    iteration: int
    epsilon: Decimal
    delta: Decimal
    blocks: tuple[str, ...]
    eta: float
    outcome: Outcome
    bound: float


@dataclass
class AdaptiveSearch:
    """The state machine of privacy-adaptive training (no I/O).

    Use: read :attr:`epsilon`, :attr:`window` and :meth:`next_eta`; run the pipeline; call
    :meth:`record` with the outcome and whether the allocation allows doubling ε.
    """

    config: AdaptiveConfig
    epsilon: Decimal = field(init=False)
    window: int = field(init=False)
    status: Status = field(init=False, default=Status.RUNNING)
    attempts: list[Attempt] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.epsilon = exact_epsilon(self.config.epsilon0)
        self.window = self.config.min_window

    @property
    def delta(self) -> Decimal:
        return exact_delta(self.config.delta, positive=False)

    def next_eta(self) -> float:
        """η_i = η/(i(i+1)) for the next iteration i."""
        i = len(self.attempts) + 1
        return self.config.eta / (i * (i + 1))

    def can_double_epsilon(self) -> bool:
        """Whether 2ε stays within ``max_epsilon``."""
        return 2 * self.epsilon <= exact_epsilon(self.config.max_epsilon, name="max_epsilon")

    def record(self, attempt: Attempt, *, epsilon_allowed: bool) -> Status:
        """Record an iteration and decide what comes next.

        Args:
            attempt: the iteration just run (its ε and window must be the current ones).
            epsilon_allowed: whether the allocation on the window allows 2ε.

        Raises:
            InternalError: the search is over, or the attempt does not match its state.
        """
        if self.status in TERMINAL:
            raise InternalError(f"the search is already {self.status.value}")
        if attempt.epsilon != self.epsilon or len(attempt.blocks) != self.window:
            raise InternalError("an attempt must use the search's current ε and window")
        self.attempts.append(attempt)
        if attempt.outcome is Outcome.ACCEPT:
            self.status = Status.ACCEPTED
            self.check_bound()
            return self.status
        if attempt.outcome is Outcome.REJECT:
            self.status = Status.REJECTED
            return self.status
        if len(self.attempts) >= self.config.max_iterations:
            self.status = Status.TIMED_OUT
            return self.status
        if epsilon_allowed and self.can_double_epsilon():
            self.epsilon = 2 * self.epsilon
        else:
            limit = self.config.max_window
            if limit is not None and 2 * self.window > limit:
                self.status = Status.TIMED_OUT
                return self.status
            self.window = 2 * self.window
        self.status = Status.RUNNING
        return self.status

    # --- the §3.3 bound ----------------------------------------------------------------------

    def resources(self) -> list[Decimal]:
        """r_i = ε_i × (window in blocks) per iteration."""
        return [a.epsilon * len(a.blocks) for a in self.attempts]

    def spent_per_block(self) -> dict[str, Decimal]:
        """The ε the search charged to each block (at most; a run may draw less)."""
        out: dict[str, Decimal] = defaultdict(Decimal)
        for a in self.attempts:
            for b in a.blocks:
                out[b] += a.epsilon
        return dict(out)

    def check_bound(self) -> None:
        """Assert §3.3's bound: all resources < 2 × the accepted iteration's (≤ 4× the best).

        Raises:
            InternalError: the bound is broken (a bug in the doubling logic).
        """
        res = self.resources()
        if not res:
            return
        if sum(res) > 2 * res[-1]:
            raise InternalError(
                f"privacy-adaptive training used {sum(res)} > 2 × {res[-1]} (ε × blocks)"
            )


@dataclass
class AdaptiveTrainer:
    """Drive one pipeline's search on a platform stream.

    Args:
        platform: the platform.
        stream: the stream's name.
        pipeline: the (ε, δ)-DP pipeline.
        context: the context whose per-block budget pays.
        config: the search parameters.
        start: index of the first block of the window in the stream's block order.
        executor: where the pipeline runs (default: in-process).
        seed: seeds the pipeline's split, training randomness and noise (experiments only;
            seeded models say ``secure_noise_ = False``); None (default) uses secure noise and
            fresh OS entropy in every iteration.
        columns: the columns to read (None: all).
    """

    platform: Platform
    stream: str
    pipeline: Pipeline
    context: str
    config: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    start: int = 0
    executor: Executor | None = None
    seed: int | None = None
    columns: tuple[str, ...] | None = None
    search: AdaptiveSearch = field(init=False)
    runs: list[PipelineRun] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.search = AdaptiveSearch(self.config)
        if self.executor is None:
            from blockbudget.training.executors import InProcessExecutor

            self.executor = InProcessExecutor()

    @property
    def status(self) -> Status:
        return self.search.status

    @property
    def model(self) -> Any:
        """The released model (only after ACCEPT)."""
        if self.status is not Status.ACCEPTED:
            raise InvalidRequestError(f"no model is released: the search is {self.status.value}")
        return self.runs[-1].model

    def _window(self, epsilon: Decimal) -> tuple[str, ...] | None:
        """The first ``window`` blocks from ``start`` that can still pay (ε, δ): Sage offers a
        pipeline only blocks with budget left (§3.2), so spent (and retired) blocks drop out
        and the window grows into new data. None when the stream does not have enough yet.

        Walks the stream from block ``start`` in pages and reads the ledger rows of the
        blocks walked past only (not every block of the stream)."""
        want = self.search.window
        cost = Budget(epsilon=epsilon, delta=self.search.delta)
        chosen: list[str] = []
        offset, page = self.start, max(2 * want, 16)
        while len(chosen) < want:
            ids = self.platform.store.block_ids(self.stream, offset=offset, limit=page)
            if not ids:
                return None
            offset += len(ids)
            ok = self.platform.can_afford(ids, cost, context=self.context, stream=self.stream)
            chosen.extend(b for b, good in zip(ids, ok, strict=True) if good)
            page = min(2 * page, 4096)
        return tuple(chosen[:want])

    def _group_cost(self, cost: Budget) -> Cost:
        """What a draw of ``cost`` is charged on the stream: group privacy for its rows per
        user, under its rule."""
        k = self.platform.group_size(self.stream)
        return group_cost(cost, k, accounting=self.platform.stream(self.stream).accounting)

    def _affordable(self, blocks: tuple[str, ...], epsilon: Decimal) -> bool:
        cost = self._group_cost(Budget(epsilon=epsilon, delta=self.search.delta))
        ok = self.platform.can_afford(blocks, cost, context=self.context, stream=self.stream)
        return all(ok)

    def step(self) -> Status:
        """Run iterations while possible; return RUNNING never — WAITING when it needs new
        blocks, or a terminal status."""
        while self.search.status not in TERMINAL:
            eps = self.search.epsilon
            blocks = self._window(eps)
            if blocks is None:
                self.search.status = Status.WAITING
                return self.search.status
            eta = self.search.next_eta()
            cost = Budget(epsilon=eps, delta=self.search.delta)
            try:
                grant = self.platform.request(
                    self.stream,
                    blocks=list(blocks),
                    budget=cost,  # per row: the platform reserves its group cost
                    context=self.context,
                    holder=self.pipeline.name,
                    columns=list(self.columns) if self.columns else None,
                )
            except BudgetExceededError:  # another pipeline took the budget meanwhile
                self.search.status = Status.WAITING
                return self.search.status
            with grant:
                run = run_iteration(
                    grant,
                    self.pipeline,
                    epsilon=eps,
                    delta=self.search.delta,
                    eta=eta,
                    iteration=len(self.search.attempts) + 1,
                    executor=self.executor,
                    seed=self.seed,
                )
            self.runs.append(run)
            attempt = Attempt(
                iteration=len(self.search.attempts) + 1,
                epsilon=eps,
                delta=self.search.delta,
                blocks=blocks,
                eta=eta,
                outcome=run.validation.outcome,
                bound=run.validation.accept_bound,
            )
            allowed = self.search.can_double_epsilon() and self._affordable(blocks, 2 * eps)
            self.search.record(attempt, epsilon_allowed=allowed)
        return self.search.status


def run_iteration(
    grant: Grant,
    pipeline: Pipeline,
    *,
    epsilon: Number,
    delta: Number,
    eta: float,
    iteration: int,
    executor: Executor | None = None,
    seed: int | None = None,
) -> PipelineRun:
    """One privacy-adaptive iteration (seed 004 §3.3) on a grant it is given.

    It reserves nothing: the pipeline's draws come out of ``grant``'s reservation (e.g. a
    scheduler's grant, :meth:`Platform.grant`), which must still hold (``epsilon``,
    ``delta``) on every block — group privacy included — or the iteration is refused before
    any row is read. The grant is not closed: its holder closes it, releasing what the
    iteration did not draw.

    Args:
        grant: an open grant on the iteration's window.
        pipeline: the (ε, δ)-DP pipeline.
        epsilon: the iteration's ε (keyword-only, as every DP parameter).
        delta: the iteration's δ.
        eta: the validator's confidence for this iteration (η/(i(i+1)) in a search).
        iteration: the 1-based iteration number (varies seeded noise between iterations).
        executor: where the pipeline runs (default: in this process).
        seed: seeds split, training and noise (experiments only; the model then says
            ``secure_noise_ = False``); None uses secure noise and fresh OS entropy.

    Returns:
        The pipeline's run: its model, validation and what it drew.

    Raises:
        ReservationError: the grant cannot pay (ε, δ) (nothing read or charged).
        InvalidRequestError / InvalidBudgetError: malformed parameters.

    Example:
        >>> with platform.grant(task.reservation_id, holder="ann") as g:  # doctest: +SKIP
        ...     run = run_iteration(g, pipeline, epsilon=0.5, delta=1e-6, eta=0.025,
        ...                         iteration=1)
    """
    from blockbudget.grant import refuse_short
    from blockbudget.training.executors import InProcessExecutor, PipelineJob

    eps = exact_epsilon(epsilon)
    dlt = exact_delta(delta, positive=False)
    check_probability(eta, name="eta")
    check_int(iteration, name="iteration")
    what = f"iteration {iteration} of pipeline {pipeline.name!r} ((ε={eps}, δ={dlt}))"
    short = grant.shortfall(Budget(epsilon=eps, delta=dlt))
    refuse_short(grant.reservation.id, what, short, accounting=grant.accounting)
    job = PipelineJob(
        pipeline=pipeline, epsilon=eps, delta=dlt, eta=eta, seed=seed, iteration=iteration
    )
    return (executor if executor is not None else InProcessExecutor()).run(job, grant)


def total_over_accepted(search: AdaptiveSearch) -> float:
    """Σ resources / accepted iteration's resources (< 2 by construction; §3.3 promises ≤ 4)."""
    res = search.resources()
    if not res or search.status is not Status.ACCEPTED:
        return math.nan
    return float(sum(res) / res[-1])
