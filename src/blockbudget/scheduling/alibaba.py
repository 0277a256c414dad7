"""Alibaba-DP: the DPack authors' privacy workload, generated from synthetic machine records.

Tholoniat, Kostopoulou, Chowdhury, Cidon, Geambasu, Lécuyer, Yang, "Packing Privacy Budget
Efficiently" (DPack, EuroSys'25, arXiv 2212.13228), §6 "Alibaba-DP", and their public generator
(github columbia/alibaba-dp-workload, ``privacy_workload.py``, read, not copied). The published
workload maps every job of the 2020 Alibaba GPU cluster trace to a DP task:

* **mechanism** — a CPU-based job (its GPU plan below 10% of the largest one) is a Laplace,
  Gaussian or subsampled-Laplace task, a GPU-based job a subsampled Gaussian (DP-SGD) or DP-FTRL
  task, each with equal probability;
* **ε** — an *affine* (not logarithmic) map of memory × runtime (GB·hours; GPU memory for GPU
  jobs) from the trace's [min, max] into [0.1, 1000]; δ = 1/(rows of the task's data),
  1,000 rows per block; epochs an affine map of runtime into [1, 200]; the batch size an affine
  map of the GPU plan (CPU jobs: the instance count) into [64, min(4096, rows/10)];
* **blocks** — an affine map of the bytes the job read into [1, 100000], truncated to an
  integer (at least 1); tasks asking for more than 100 blocks are dropped; every task asks for
  the most recent blocks and has profit 1;
* **filter** — a task is dropped unless its best-order normalised demand
  min_α ε(α) / (ε_g − log(1/δ_g)/(α−1)) (over orders with positive block capacity) lies in
  [0.001, 1];
* **arrivals** — online runs release the tasks over the blocks' arrival span in trace order
  (DPack's ``avg_num_tasks_per_block`` is 100; its Alibaba runs start from 100 blocks).

**The real trace is not available offline** (the published task file is built from a download
of the Alibaba trace), so :func:`synthetic_machine_trace` draws stand-in job records, seeded, from
truncated log-normal distributions — the heavy-tailed shape that Weng et al., "MLaaS in the
Wild: Workload Analysis and Scheduling in Large-Scale Heterogeneous GPU Clusters" (NSDI'22) report
for this trace's runtimes and resource requests. The parameters (:data:`TRACE`) are ours, not
fitted to the trace; their truncation bounds play the role of the trace's observed min and max in
the affine maps, so the maps do not depend on how many records are drawn.

RDP curves (orders :data:`~blockbudget.budget.ALPHAS`, the generator's own list):

* Laplace: one release of scale 1/ε (pure ε-DP), exact curve (Mironov 2017, Prop. 6);
* Gaussian: ``epochs`` releases, each with σ = √(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm. A.1),
  as the published generator calibrates them; curve epochs·α/(2σ²) (Mironov 2017, Prop. 7);
* DP-FTRL: ``epochs`` tree-aggregation passes over rows/batch leaves, each a Gaussian of
  sensitivity √depth, depth = ⌈log2(leaves + 1)⌉ (Kairouz et al., "Practical and Private (Deep)
  Learning without Sampling or Shuffling", ICML'21, App. D; dp-accounting's
  ``SingleEpochTreeAggregationDpEvent``), per-node σ as for the Gaussian;
* subsampled Gaussian (DP-SGD) and subsampled Laplace: Poisson rate q = batch/rows, steps =
  epochs·rows/batch, the noise multiplier searched until the (ε, δ) of the composed curve lies in
  [0.9ε, ε], as the published generator does. Curves at integer orders: Mironov, Talwar & Zhang,
  "Rényi Differential Privacy of the Sampled Gaussian Mechanism" (2019), §3.3 (exact); Zhu &
  Wang, "Poisson Subsampled Rényi Differential Privacy" (ICML'19), Thm. 6 (an upper bound for
  any mechanism, here Laplace); a fractional order takes the next integer order's value, an
  upper bound since RDP grows with the order (van Erven & Harremoës 2014, Thm. 3).

(ε, δ) from a curve: Canonne, Kamath & Steinke 2020, Prop. 12, as dp-accounting computes it.

Differences from the published generator, on purpose: DP-FTRL uses the tree's depth over
rows/batch leaves per epoch, where the published one composes ⌈ln(rows)⌉ Gaussians; subsampled
Laplace uses Zhu & Wang's general bound where the published one calls autodp; curves that are
infinite at an order never occur here (the published one writes 10^6 there).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Accounting
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.scheduling.base import BlockSpec, TaskSpec
from blockbudget.scheduling.mechanism_rdp import (
    best_normalized_demand,
    calibrate_noise,
    subsampled_gaussian_rdp,
    subsampled_laplace_rdp,
)
from blockbudget.scheduling.workloads import Workload

__all__ = [
    "EPSILON_RANGE",
    "NORMALIZED_DEMAND_RANGE",
    "TRACE",
    "AlibabaTask",
    "Arrivals",
    "GenerationStats",
    "MachineRecords",
    "Mechanism",
    "TruncatedLogNormal",
    "alibaba_dp",
    "alibaba_dp_tasks",
    "open_variant",
    "synthetic_machine_trace",
]

FloatArray = npt.NDArray[np.float64]

#: The published generator's ε range (``epsilon_min_cpu``/``_gpu`` = 0.1, ``epsilon_max``).
EPSILON_RANGE = (0.1, 1000.0)
#: Kept tasks' best-order normalised demand (``rdp_epsilon_min`` = 0.001, at most 1).
NORMALIZED_DEMAND_RANGE = (1e-3, 1.0)
#: Bytes read map affinely into this many blocks (``n_blocks_min``, ``n_blocks_max``) ...
BLOCKS_RANGE = (1, 100_000)
#: ... and tasks asking for more than this are dropped (``n_blocks_cutoff``).
BLOCKS_CUTOFF = 100
#: Rows per block (``avg_block_size``): δ = 1/(rows of the task's blocks).
ROWS_PER_BLOCK = 1000
EPOCHS_RANGE = (1, 200)
BATCH_RANGE = (64, 4096)
#: A job is CPU-based when its GPU plan is below this fraction of the largest plan.
CPU_GPU_PLAN_FRACTION = 0.1


class Mechanism(Enum):
    """The five mechanisms of Alibaba-DP (three for CPU-based jobs, two for GPU-based ones)."""

    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"
    SUBSAMPLED_LAPLACE = "subsampled_laplace"
    SUBSAMPLED_GAUSSIAN = "subsampled_gaussian"
    DP_FTRL = "dp_ftrl"


CPU_MECHANISMS = (Mechanism.LAPLACE, Mechanism.GAUSSIAN, Mechanism.SUBSAMPLED_LAPLACE)
GPU_MECHANISMS = (Mechanism.SUBSAMPLED_GAUSSIAN, Mechanism.DP_FTRL)


class Arrivals(Enum):
    """How blocks and tasks arrive."""

    ONLINE = "online"  # initial blocks at 0, then one block per time unit, tasks in between
    OFFLINE = "offline"  # every block and task at time 0 (one batch)


@dataclass(frozen=True)
class TruncatedLogNormal:
    """A log-normal truncated to [low, high] (log10 median ``median``, spread ``decades``).

    Example:
        >>> d = TruncatedLogNormal(low=1.0, high=100.0, median=10.0, decades=0.5)
        >>> x = d.sample(np.random.default_rng(0), 1000)
        >>> bool(x.min() >= 1.0 and x.max() <= 100.0)
        True
    """

    low: float
    high: float
    median: float
    decades: float

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """``n`` draws by inverting the normal CDF between the bounds (no mass piles up at them)."""
        from scipy.special import ndtr, ndtri

        mu, s = math.log10(self.median), self.decades
        a = ndtr((math.log10(self.low) - mu) / s)
        b = ndtr((math.log10(self.high) - mu) / s)
        z = ndtri(rng.uniform(a, b, n))
        out: FloatArray = np.clip(10.0 ** (mu + s * z), self.low, self.high)
        return out


#: Stand-in distributions of the trace's job features (ours; see the module docstring).
TRACE: dict[str, TruncatedLogNormal] = {
    "runtime_hours": TruncatedLogNormal(low=10 / 3600, high=72.0, median=1.5, decades=0.8),
    "cpu_memory_gb": TruncatedLogNormal(low=0.05, high=128.0, median=6.0, decades=0.5),
    "gpu_memory_gb": TruncatedLogNormal(low=0.1, high=32.0, median=3.0, decades=0.5),
    "gpu_plan_percent": TruncatedLogNormal(low=5.0, high=800.0, median=50.0, decades=0.5),
    "instances": TruncatedLogNormal(low=1.0, high=1000.0, median=2.0, decades=0.6),
    "read_bytes": TruncatedLogNormal(low=1e3, high=1e14, median=1e8, decades=1.5),
}
#: Fraction of jobs that plan no GPU at all.
CPU_ONLY_FRACTION = 0.2


@dataclass(frozen=True)
class MachineRecords:
    """Synthetic job records standing in for the Alibaba 2020 GPU trace (one entry per job).

    Attributes:
        submit: submission times (ascending; Poisson, rate 1).
        runtime_hours, cpu_memory_gb, gpu_memory_gb: run time and average memory use.
        gpu_plan_percent: GPU plan (100 = one GPU; 0 for CPU-only jobs).
        instances: instance count.
        read_bytes: bytes read over the network.
    """

    submit: FloatArray
    runtime_hours: FloatArray
    cpu_memory_gb: FloatArray
    gpu_memory_gb: FloatArray
    gpu_plan_percent: FloatArray
    instances: FloatArray
    read_bytes: FloatArray

    def __len__(self) -> int:
        return len(self.submit)

    @property
    def cpu_based(self) -> npt.NDArray[np.bool_]:
        """The published rule: GPU plan below 10% of the largest possible plan."""
        high = TRACE["gpu_plan_percent"].high
        return self.gpu_plan_percent < CPU_GPU_PLAN_FRACTION * high


def synthetic_machine_trace(n: int, *, seed: int, start: float = 0.0) -> MachineRecords:
    """``n`` seeded stand-in job records (see :data:`TRACE`; the real trace is not bundled).

    Example:
        >>> r = synthetic_machine_trace(100, seed=0)
        >>> len(r), bool(np.all(np.diff(r.submit) > 0))
        (100, True)

    Raises:
        InvalidRequestError: ``n`` < 1.
    """
    if n < 1:
        raise InvalidRequestError(f"need at least one record, got n={n}")
    rng = np.random.default_rng(seed)
    draw = {name: dist.sample(rng, n) for name, dist in TRACE.items()}
    plan = np.where(rng.random(n) < CPU_ONLY_FRACTION, 0.0, draw["gpu_plan_percent"])
    return MachineRecords(
        submit=start + np.cumsum(rng.exponential(1.0, n)),
        runtime_hours=draw["runtime_hours"],
        cpu_memory_gb=draw["cpu_memory_gb"],
        gpu_memory_gb=draw["gpu_memory_gb"],
        gpu_plan_percent=plan,
        instances=np.round(draw["instances"]),
        read_bytes=draw["read_bytes"],
    )


def _affine(value: float, low: float, high: float, out_low: float, out_high: float) -> float:
    """The published ``map_to_range``: [low, high] → [out_low, out_high], affinely."""
    return out_low + (value - low) / (high - low) * (out_high - out_low)


# --- tasks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlibabaTask:
    """One kept Alibaba-DP task (profit 1, the latest ``n_blocks`` blocks).

    Attributes:
        index: position of its record in the synthetic trace.
        submit: the record's submission time.
        cpu_based: whether the record is a CPU-based job (the mechanism's family).
        usage: memory × runtime (GB·hours; GPU memory for GPU-based jobs), mapped to ε.
        read_bytes: bytes read, mapped to the block count.
        mechanism: which of the five mechanisms.
        epsilon: the mapped ε; delta: 1/(rows of its blocks).
        n_blocks: blocks requested (from bytes read).
        epochs, batch_size: training parameters (where the mechanism has them).
        noise: the noise multiplier or Laplace scale (per unit sensitivity).
        curve: its RDP demand per block.
        normalized: best-order normalised demand on the workload's block capacity.
    """

    index: int
    submit: float
    cpu_based: bool
    usage: float
    read_bytes: float
    mechanism: Mechanism
    epsilon: float
    delta: float
    n_blocks: int
    epochs: int
    batch_size: int
    noise: float
    curve: RdpCurve
    normalized: float


@dataclass(frozen=True)
class GenerationStats:
    """What the filter did: records read, tasks kept, and drops by reason."""

    records: int = 0
    kept: int = 0
    too_small: int = 0
    too_large: int = 0
    too_many_blocks: int = 0
    by_mechanism: Mapping[str, int] = field(default_factory=dict)


def _record_task(rec: MachineRecords, i: int, mech: Mechanism) -> AlibabaTask:
    """Map record ``i`` to a task with mechanism ``mech`` (before the filter)."""
    cpu = mech in CPU_MECHANISMS
    rt, read = TRACE["runtime_hours"], TRACE["read_bytes"]
    n_blocks = max(1, int(_affine(rec.read_bytes[i], read.low, read.high, *BLOCKS_RANGE)))
    rows = n_blocks * ROWS_PER_BLOCK
    delta = 1.0 / rows
    mem = TRACE["cpu_memory_gb" if cpu else "gpu_memory_gb"]
    usage = (rec.cpu_memory_gb if cpu else rec.gpu_memory_gb)[i] * rec.runtime_hours[i]
    epsilon = _affine(usage, mem.low * rt.low, mem.high * rt.high, *EPSILON_RANGE)
    epochs = int(_affine(rec.runtime_hours[i], rt.low, rt.high, *EPOCHS_RANGE))
    top = min(BATCH_RANGE[1], rows // 10)
    if cpu:
        inst = TRACE["instances"]
        batch = int(_affine(rec.instances[i], inst.low, inst.high, BATCH_RANGE[0], top))
    else:
        plan = TRACE["gpu_plan_percent"]
        low = CPU_GPU_PLAN_FRACTION * plan.high
        batch = int(_affine(rec.gpu_plan_percent[i], low, plan.high, BATCH_RANGE[0], top))
    batch = max(1, min(batch, rows))
    q, steps = batch / rows, epochs * rows // batch
    classic_sigma = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    if mech is Mechanism.LAPLACE:
        noise = 1.0 / epsilon
        curve = RdpCurve.laplace(scale=noise)
    elif mech is Mechanism.GAUSSIAN:
        noise = classic_sigma
        curve = RdpCurve.gaussian(sigma=noise / math.sqrt(epochs))
    elif mech is Mechanism.DP_FTRL:
        noise = classic_sigma
        depth = math.ceil(math.log2(rows // batch + 1))
        curve = RdpCurve.gaussian(sigma=noise, sensitivity=math.sqrt(depth * epochs))
    else:
        fn = subsampled_gaussian_rdp if mech is Mechanism.SUBSAMPLED_GAUSSIAN else None

        def at(noise: float) -> FloatArray:
            if fn is not None:
                return fn(sample_rate=q, sigma=noise, steps=steps)
            return subsampled_laplace_rdp(sample_rate=q, scale=noise, steps=steps)

        noise = calibrate_noise(at, epsilon=epsilon, delta=delta)
        values = at(noise)
        curve = RdpCurve.from_function(lambda a: float(values[ALPHAS.index(a)]))
    return AlibabaTask(
        index=i,
        submit=float(rec.submit[i]),
        cpu_based=cpu,
        usage=float(usage),
        read_bytes=float(rec.read_bytes[i]),
        mechanism=mech,
        epsilon=epsilon,
        delta=delta,
        n_blocks=n_blocks,
        epochs=epochs,
        batch_size=batch,
        noise=noise,
        curve=curve,
        normalized=math.nan,
    )


def alibaba_dp_tasks(
    n_tasks: int,
    *,
    epsilon_g: float = 10.0,
    delta_g: float = 1e-7,
    seed: int = 0,
) -> tuple[list[AlibabaTask], GenerationStats]:
    """The first ``n_tasks`` kept Alibaba-DP tasks of a seeded synthetic trace, in trace order.

    Records are drawn in chunks until enough tasks survive the filter; the affine maps use the
    stand-in distributions' bounds, so a task does not depend on how many records were drawn.

    Args:
        n_tasks: how many kept tasks to return.
        epsilon_g: ε of the block capacity the demands are normalised by.
        delta_g: δ of the same.
        seed: seed of the synthetic trace and of the mechanism draws.

    Returns:
        The kept tasks and what the filter did.

    Raises:
        InvalidRequestError: ``n_tasks`` < 1 or a block capacity with no positive order.
    """
    if n_tasks < 1:
        raise InvalidRequestError(f"need at least one task, got n_tasks={n_tasks}")
    if not (epsilon_g > 0 and 0 < delta_g < 1):
        raise InvalidRequestError(f"need ε_g > 0 and 0 < δ_g < 1, got {epsilon_g}, {delta_g}")
    kept, stats = _generate(n_tasks, float(epsilon_g), float(delta_g), seed)
    return list(kept), stats


@functools.lru_cache(maxsize=2)
def _generate(
    n_tasks: int, epsilon_g: float, delta_g: float, seed: int
) -> tuple[tuple[AlibabaTask, ...], GenerationStats]:
    """:func:`alibaba_dp_tasks`, memoized (values are frozen): a benchmark that builds several
    workloads from the same tasks generates them once."""
    low, high = NORMALIZED_DEMAND_RANGE
    rng = np.random.default_rng(seed)
    kept: list[AlibabaTask] = []
    counts = {"records": 0, "too_small": 0, "too_large": 0, "too_many_blocks": 0}
    by_mech: dict[str, int] = {m.value: 0 for m in Mechanism}
    chunk, start = max(64, int(n_tasks * 1.5)), 0.0
    while len(kept) < n_tasks:
        rec = synthetic_machine_trace(chunk, seed=int(rng.integers(2**63)), start=start)
        start = float(rec.submit[-1])
        picks = rng.random(len(rec))
        for i in range(len(rec)):
            if len(kept) >= n_tasks:
                break
            counts["records"] += 1
            pool = CPU_MECHANISMS if rec.cpu_based[i] else GPU_MECHANISMS
            mech = pool[min(int(picks[i] * len(pool)), len(pool) - 1)]
            read = TRACE["read_bytes"]
            blocks = max(1, int(_affine(rec.read_bytes[i], read.low, read.high, *BLOCKS_RANGE)))
            if blocks > BLOCKS_CUTOFF:
                counts["too_many_blocks"] += 1
                continue
            task = _record_task(rec, i, mech)
            norm = best_normalized_demand(task.curve, epsilon_g=epsilon_g, delta_g=delta_g)
            if norm < low:
                counts["too_small"] += 1
                continue
            if norm > high:
                counts["too_large"] += 1
                continue
            by_mech[mech.value] += 1
            kept.append(replace(task, index=counts["records"] - 1, normalized=norm))
    stats = GenerationStats(kept=len(kept), by_mechanism=MappingProxyType(by_mech), **counts)
    return tuple(kept), stats


def alibaba_dp(
    *,
    n_blocks: int = 130,
    initial_blocks: int = 100,
    tasks_per_block: float = 100.0,
    arrivals: Arrivals = Arrivals.ONLINE,
    epsilon_g: float = 10.0,
    delta_g: float = 1e-7,
    timeout: float | None = None,
    seed: int = 0,
) -> Workload:
    """The Alibaba-DP workload (see the module docstring) as simulator blocks and NAMED tasks.

    ONLINE: ``initial_blocks`` blocks at time 0 and block ``initial_blocks + m`` at time m
    (m = 0, 1, ...); ``tasks_per_block`` tasks per online block arrive in trace order, their
    submission times rescaled onto [0, online blocks) as DPack's simulator does. OFFLINE: all
    blocks and ``tasks_per_block × n_blocks`` tasks at time 0. Each task names the latest
    ``n_blocks`` blocks present when it arrives (all present ones if fewer; with at least 100
    initial blocks that never happens, as in DPack's runs). Profits are 1; RDP accounting with
    block capacity (ε_g, δ_g) = (10, 1e-7) by default (DPack's).

    Example:
        >>> w = alibaba_dp(n_blocks=4, initial_blocks=2, tasks_per_block=5, seed=0)
        >>> len(w.blocks), len(w.tasks), w.accounting.value
        (4, 10, 'rdp')

    Raises:
        InvalidRequestError: sizes out of range (no online block in ONLINE mode, fewer than
            one task), or a bad block capacity.
    """
    if not isinstance(arrivals, Arrivals):
        raise InvalidRequestError(f"arrivals must be an Arrivals, got {arrivals!r}")
    online = n_blocks - initial_blocks if arrivals is Arrivals.ONLINE else n_blocks
    if n_blocks < 1 or initial_blocks < 0 or online < 1:
        raise InvalidRequestError(
            f"need n_blocks >= 1 and, online, n_blocks > initial_blocks >= 0; got "
            f"n_blocks={n_blocks}, initial_blocks={initial_blocks}"
        )
    n_tasks = round(tasks_per_block * online)
    if n_tasks < 1:
        raise InvalidRequestError(f"tasks_per_block={tasks_per_block} gives no task")
    kept, _ = alibaba_dp_tasks(n_tasks, epsilon_g=epsilon_g, delta_g=delta_g, seed=seed)
    cap = Budget(epsilon=epsilon_g, delta=delta_g)
    if arrivals is Arrivals.OFFLINE:
        block_times = np.zeros(n_blocks)
        task_times = np.zeros(n_tasks)
    else:
        block_times = np.r_[np.zeros(initial_blocks), np.arange(online, dtype=np.float64)]
        submit = np.array([t.submit for t in kept])
        span = submit[-1] - submit[0] + (submit[-1] - submit[0]) / max(1, n_tasks - 1)
        task_times = (submit - submit[0]) / span * online if span > 0 else np.zeros(n_tasks)
    blocks = tuple(BlockSpec(f"b{i}", float(block_times[i]), cap) for i in range(n_blocks))
    tasks = []
    for j, (t, when) in enumerate(zip(kept, task_times, strict=True)):
        present = int(np.searchsorted(block_times, when, side="right"))
        first = max(0, present - t.n_blocks)
        names = tuple(blocks[i].block_id for i in range(first, present))
        tasks.append(TaskSpec(f"t{j}", float(when), t.curve, blocks=names, timeout=timeout))
    name = f"alibaba-dp-{arrivals.value}"
    return Workload(name, blocks, tuple(tasks), Accounting.RDP)


@dataclass(frozen=True)
class _SplitProfit:
    """p_ij of an OPEN task: its profit split evenly over the blocks it needs."""

    value: float

    def __call__(self, block_id: str) -> float:
        return self.value


def open_variant(workload: Workload) -> Workload:
    """The same demands and arrivals as OPEN tasks, for schedulers that choose blocks (seed
    000's Alg. 2): a task needing k blocks takes any k (``max_blocks = min_blocks = k``), with
    significance p_ij = profit/k on every block, so a granted task realizes its profit.

    ``upper``/``lower`` are the largest and smallest p_ij/ε_j over the tasks, ε_j the best-order
    share of an empty block times ε_g (the units of seed 000's Assumption 2 and of
    :func:`~blockbudget.scheduling.threshold.demand_share`).

    Example:
        >>> w = open_variant(alibaba_dp(n_blocks=4, initial_blocks=2, tasks_per_block=5))
        >>> w.tasks[0].shape.value, w.lower <= w.upper
        ('open', True)

    Raises:
        InvalidRequestError: a task without named blocks or an empty workload.
    """
    if not workload.tasks or not workload.blocks:
        raise InvalidRequestError("need a workload with blocks and tasks")
    cap = workload.blocks[0].capacity
    eps_g, delta_g = float(cap.epsilon), float(cap.delta)
    out, ratios = [], []
    for t in workload.tasks:
        if t.blocks is None:
            raise InvalidRequestError(f"task {t.task_id!r} names no blocks")
        k = len(t.blocks)
        p = t.profit / k
        assert isinstance(t.demand, RdpCurve)
        share = best_normalized_demand(t.demand, epsilon_g=eps_g, delta_g=delta_g)
        ratios.append(p / (share * eps_g))
        out.append(
            TaskSpec(
                t.task_id,
                t.arrival,
                t.demand,
                max_blocks=k,
                min_blocks=k,
                profit=t.profit,
                significance=_SplitProfit(p),
                timeout=t.timeout,
            )
        )
    return Workload(
        f"{workload.name}-open",
        workload.blocks,
        tuple(out),
        workload.accounting,
        upper=max(ratios),
        lower=min(ratios),
    )
