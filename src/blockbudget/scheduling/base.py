"""The one Scheduler interface and the registry of implementations (the model's value types —
blocks, tasks, decisions — live in :mod:`blockbudget.scheduling.spec` and are re-exported here).

A scheduler decides which waiting task (query, pipeline) gets which blocks and how much of
their budget. Everything it does goes through a :class:`~blockbudget.scheduling.pool.Pool`,
which holds the per-block budget state and *refuses* anything that would overspend a block or
revisit a closed decision. Schedulers therefore cannot break the invariants; the contract test
suite (``tests/scheduling/test_contract.py``) checks them again from the decision log alone.

The model (seed ``000_de3e86489c8646aa.txt`` §IV-B, Eq. (5); PrivateKube OSDI'21 §4; DPack
EuroSys'25 §3; Sage seed ``004_2b5d216070ae2ded.txt`` §3.2):

* **Blocks** (:class:`BlockSpec`) arrive over time, each with a global capacity (ε_g, δ_g)
  guarded by the stream's registered accounting rule
  (:class:`~blockbudget.accounting.AccountingRule`; e.g. basic: Σε ≤ ε_g and Σδ ≤ δ_g; rdp: some
  order α keeps Σε(α) ≤ ε_g − log(1/δ_g)/(α−1); strong: adaptive strong composition, seed
  000's "adaptive composition" variant). A scheduler sees only the *shape* of the rule's fit
  test (:class:`~blockbudget.accounting.Combine`: every feature within capacity, some
  feature, or the filter's own non-linear test) and each block's capacity per feature.
* **Tasks** (:class:`TaskSpec`) arrive over time with a per-block demand (a cost of the
  rule's kind: a :class:`~blockbudget.budget.Budget`, an :class:`~blockbudget.budget.RdpCurve`,
  a :class:`~blockbudget.accounting.GaussianDp`), a profit
  (weight), optional significance values p_ij per block (seed 000 §IV-B), an optional access
  limit c_j (``max_blocks``), an optional timeout, and optionally a validator (seed 000 Alg. 2's
  *Flag*). A task has one of two shapes (:class:`TaskShape`):

  - ``NAMED`` — it names the blocks it needs (PrivateKube/DPack/Sage: "the last 10 blocks") and
    is served all-or-nothing with ``demand`` on each of them;
  - ``OPEN`` — any available block will do; the scheduler chooses up to ``max_blocks`` of them
    (seed 000: the platform assigns blocks to queries by significance) and may grant less than
    ``demand`` on a block where the algorithm allows partial grants (seed 000 Alg. 3).

* **Decisions** (:class:`Decision`) are what the pool records, in order:

  - ``RESERVE`` — set aside ``cost`` of a block for a still-waiting task (incremental: a task can
    accumulate reservations block by block, as Sage's Block/Conserve does with each new block's
    even split, or as DPF's unlocking would per task). Reserved budget counts as spent for every
    other task (Sage's "allocated" budget).
  - ``RELEASE`` — give a waiting task's reservation on one block back to the block.
  - ``CHARGE`` — spend ``cost`` of a block for the task's computation. Irreversible. A charge
    first consumes the task's own reservation on that block (the pool logs a ``RELEASE`` of it
    just before).
  - ``OVERHEAD`` — spend ``cost`` of a block for the *scheduler's* own DP work on behalf of a
    task (seed 000 Alg. 1's AboveThreshold comparison cost ε0). Irreversible.
  - ``GRANT`` — the task is served (terminal). Its remaining reservations are released first.
  - ``REJECT`` — the task is turned down (terminal).
  - ``EXPIRE`` — the task timed out, or the run ended while it waited (terminal).
  - ``CREDIT`` — budget a block got back outside the scheduler (a live platform's grant was
    spent less than it held, or cancelled): the block's charged budget goes down by ``cost``,
    never below zero. Logged under the synthetic task that carries usage the ledger shows
    (a simulation never credits). Not a decision about any task.

  Terminal decisions are final: after one, the pool refuses every operation for that task
  (irrevocable decisions, seed 000 §III-B). Charged budget never returns.

Life of a run (driven by :func:`blockbudget.scheduling.simulator.simulate`, or by a platform
loop): for each event in time order the driver sets ``pool.now`` and calls
:meth:`Scheduler.on_block` after :meth:`Pool.add_block`, :meth:`Scheduler.on_task` after
:meth:`Pool.submit`, and :meth:`Scheduler.on_tick` every :attr:`Scheduler.tick_interval` time
units when that is set (DPF T-unlocking, DPack batches), and :meth:`Scheduler.on_settle` after
the last event of each instant. Timeouts are expired by the pool
(:meth:`Pool.expire_due`) before the scheduler sees the event. At the end the driver calls
:meth:`Scheduler.on_finish` and then :meth:`Pool.close`, which expires what still waits.

Writing a scheduler:

1. Subclass :class:`Scheduler`; set ``name`` (unique, lower-case, used by the registry and the
   CLI), ``shapes`` (the task shapes it serves) and ``combines`` (the shapes of fit test it
   supports, :class:`~blockbudget.accounting.Combine`: a scheduler serves every registered
   rule whose filter has one of them — :meth:`Scheduler.serves`).
2. Keep your own queue of waiting task ids; check ``pool.is_pending(task_id)`` before acting
   (tasks may have expired in between).
3. Act only through the pool: ``pool.reserve``, ``pool.release``, ``pool.charge``,
   ``pool.charge_overhead``, ``pool.grant``, ``pool.reject``. Use ``pool.fits`` /
   ``pool.fits_many`` to test before acting, and the read-only arrays (``pool.capacity``,
   ``pool.charged``, ``pool.reserved``, ``pool.remaining()``) for vectorized decisions.
4. Use ``self.rng`` for non-private randomness (block order; OS entropy unless a seed is
   given) and ``self.noise`` for DP noise (SecureNoise unless a test or experiment passes
   SeededNoise). Same seed and same noise seed must give the same decisions.
5. Expose it: list the class in the module-level ``SCHEDULERS`` tuple of a module inside
   ``blockbudget.scheduling``. :func:`scheduler_classes` finds it, and the contract suite runs it.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from blockbudget.accounting import Combine, get_rule
from blockbudget.decimals import plain_number
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource, resolve_noise
from blockbudget.scheduling.pool import Pool
from blockbudget.scheduling.spec import (
    TERMINAL_KINDS,
    BlockSpec,
    Decision,
    DecisionKind,
    SignificanceFn,
    TaskShape,
    TaskSpec,
    TaskStatus,
    ValidatorFn,
    check_positive,
)

__all__ = [
    "TERMINAL_KINDS",
    "BlockSpec",
    "Decision",
    "DecisionKind",
    "Scheduler",
    "SignificanceFn",
    "TaskShape",
    "TaskSpec",
    "TaskStatus",
    "ValidatorFn",
    "check_positive",
    "get_scheduler",
    "scheduler_classes",
]


class Scheduler(ABC):
    """The contract every scheduler implements (see the module docstring for the run loop).

    Class attributes:
        name: unique registry name, e.g. ``"dpf-n"``.
        shapes: the task shapes it serves; the driver rejects the others before calling it.
        combines: the shapes of fit test (:class:`~blockbudget.accounting.Combine`) it
            supports; it serves every registered rule of one of them (:meth:`serves`).
        tick_interval: when not None, the driver calls :meth:`on_tick` every this many time
            units (instance attribute may override it).
        drain_time: how long after the last arrival the driver keeps ticking by default (e.g.
            a T-unlocking lifetime, so the last blocks unlock fully).
        exact: True for schedulers that solve an NP-hard problem exactly (the offline
            optimum); the contract suite gives them smaller workloads.

    Randomness (the project's rule: no seed means fresh OS entropy). Two sources, kept apart:

    * ``self.rng`` draws *public* choices that never look at data (the order in which seed 000
      Alg. 2 visits blocks, a random-blocks baseline's pick). ``seed`` None (the default) seeds
      it from OS entropy; an explicit ``seed`` makes it reproducible, which costs no privacy
      (the choices are data-independent) but is meant for experiments and tests.
    * ``self.noise`` draws the DP noise of decisions that do look at private data (seed 000
      Alg. 1's AboveThreshold comparisons). None means :class:`SecureNoise` (OpenDP, OS
      entropy); a :class:`SeededNoise` makes the decisions reproducible and
      :attr:`secure_noise` False, and a :class:`SimulationResult` says so.

    Args:
        seed: seed of ``self.rng`` (numpy Generator) for non-private random choices; None
            (default) for OS entropy.
        noise: the DP noise source for schedulers that spend privacy on decisions (seed 000
            Alg. 1); None means SecureNoise. Pass SeededNoise for reproducible experiments.
    """

    name: ClassVar[str] = ""
    shapes: ClassVar[frozenset[TaskShape]] = frozenset({TaskShape.NAMED})
    combines: ClassVar[frozenset[Combine]] = frozenset({Combine.ALL, Combine.ANY})
    tick_interval: float | None = None
    drain_time: float = 0.0
    exact: ClassVar[bool] = False

    def __init__(self, *, seed: int | None = None, noise: NoiseSource | None = None) -> None:
        seed = plain_number(seed)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidRequestError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        self.rng = np.random.default_rng(seed)  # None: fresh OS entropy
        self._noise = None if noise is None else resolve_noise(noise)

    @property
    def secure_noise(self) -> bool:
        """Whether the DP noise of this scheduler's decisions is secure (not a SeededNoise)."""
        return self._noise is None or self._noise.secure

    @property
    def noise(self) -> NoiseSource:
        """The DP noise source (SecureNoise, created on first use, unless one was given)."""
        if self._noise is None:
            self._noise = resolve_noise(None)
        return self._noise

    @classmethod
    def serves(cls, accounting: str) -> bool:
        """Whether this scheduler can schedule blocks under rule ``accounting``: the shape of
        the rule's fit test is one of :attr:`combines`.

        Raises:
            InvalidRequestError: no rule has that name.

        Example:
            >>> from blockbudget.scheduling import get_scheduler
            >>> [get_scheduler("fcfs").serves(r) for r in ("basic", "strong", "gdp")]
            [True, False, True]
        """
        return get_rule(accounting).combine in cls.combines

    @classmethod
    def check_serves(cls, accounting: str, *, stream: str | None = None) -> None:
        """Refuse a rule this scheduler cannot schedule (:meth:`serves`).

        Raises:
            InvalidRequestError: it cannot (the message names the scheduler, the stream if
                given, the rule, its shape and the shapes the scheduler supports).
        """
        rule = get_rule(accounting)
        if rule.combine in cls.combines:
            return
        where = "" if stream is None else f"stream {stream!r} under "
        shapes = ", ".join(sorted(c.value for c in cls.combines)) or "none"
        raise InvalidRequestError(
            f"scheduler {cls.name!r} cannot schedule {where}{rule.name} accounting: its fit "
            f"test has shape {rule.combine.value!r}, and the scheduler supports {shapes}"
        )

    def on_block(self, pool: Pool, block: BlockSpec) -> None:  # noqa: B027 - optional hook
        """A block was added to ``pool`` (its budget is all unallocated). Default: nothing."""

    @abstractmethod
    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        """A task was submitted to ``pool`` (status PENDING). Decide now or queue it."""

    def on_tick(self, pool: Pool) -> None:  # noqa: B027 - optional hook
        """Periodic call every :attr:`tick_interval` (when set). Default: nothing."""

    def on_credit(self, pool: Pool, block_ids: Sequence[str]) -> None:  # noqa: B027
        """A live driver credited budget back to ``block_ids`` (:meth:`Pool.credit`: a grant
        spent less, a cancel, a released hold): waiting tasks that may use one of them may
        fit now. Schedulers that keep waiting tasks retry those, in their own order.
        Default: nothing (a simulation never credits)."""

    def on_settle(self, pool: Pool) -> None:  # noqa: B027 - optional hook
        """The driver has shown the scheduler every task it knows of for now (the simulator
        after the last event of an instant; a live leader after each submission it enters
        and at the end of every pump, once tasks it re-enters one by one are all in): a
        decision that depends on who else waits (DPF's lending) is safe now. Default:
        nothing."""

    def on_finish(self, pool: Pool) -> None:  # noqa: B027 - optional hook
        """The run ends; last chance to decide. What still waits is then expired."""

    def describe(self) -> str:
        """One line naming the scheduler and its parameters (for tables)."""
        return self.name


def scheduler_classes() -> dict[str, type[Scheduler]]:
    """Every scheduler in the package, by name.

    Walks ``blockbudget.scheduling`` with :mod:`pkgutil`, imports each module and collects the
    classes listed in its ``SCHEDULERS`` tuple — adding a scheduler means adding a module.

    Raises:
        InternalError: two classes register the same name, or a listed class is not a
            :class:`Scheduler` with a name.
    """
    import blockbudget.scheduling as package

    found: dict[str, type[Scheduler]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for cls in getattr(module, "SCHEDULERS", ()):
            if not (isinstance(cls, type) and issubclass(cls, Scheduler) and cls.name):
                raise InternalError(f"{info.name}.SCHEDULERS lists {cls!r}, not a named Scheduler")
            if cls.name in found and found[cls.name] is not cls:
                raise InternalError(f"scheduler {cls.name!r} is registered twice")
            found[cls.name] = cls
    return found


def get_scheduler(name: str, **kwargs: Any) -> Scheduler:
    """Build the registered scheduler called ``name`` with ``kwargs``.

    Raises:
        InvalidRequestError: no scheduler has that name (the message lists the known ones).
    """
    classes = scheduler_classes()
    if name not in classes:
        known = ", ".join(sorted(classes)) or "none"
        raise InvalidRequestError(f"unknown scheduler {name!r}; known schedulers: {known}")
    return classes[name](**kwargs)


def names(items: Sequence[Scheduler]) -> list[str]:
    """The names of some schedulers (for tables)."""
    return [s.name for s in items]
