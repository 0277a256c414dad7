"""The randomness rule for schedulers: no seed means fresh OS entropy; a seed is an explicit,
experiment-only choice, and a result whose DP decisions used seeded noise says so."""

from __future__ import annotations

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling import scheduler_classes
from blockbudget.scheduling.base import BlockSpec, Scheduler, TaskShape, TaskSpec
from blockbudget.scheduling.baselines import RandomBlocks, Streaming
from blockbudget.scheduling.simulator import SimulationResult, simulate
from blockbudget.scheduling.threshold import MixedThreshold, OnlineThreshold

from .contract import workload
from .fakes import ZeroNoise

N_BLOCKS = 40


def _open_run(scheduler: Scheduler) -> SimulationResult:
    """40 blocks at t = 0, then 12 OPEN tasks of 3 blocks each: which blocks serve them is
    decided only by the scheduler's random block order."""
    blocks = [BlockSpec(f"b{i}", 0.0, Budget(epsilon=1.0)) for i in range(N_BLOCKS)]
    sig = {f"b{i}": 50.0 for i in range(N_BLOCKS)}
    tasks = [
        TaskSpec(f"t{j}", 1.0 + j, Budget(epsilon=0.05), max_blocks=3, significance=sig)
        for j in range(12)
    ]
    return simulate(scheduler, blocks, tasks, accounting=Accounting.BASIC)


def _log(result: SimulationResult) -> list[tuple[object, ...]]:
    return [d.key() for d in result.pool.decisions]


@pytest.mark.parametrize(
    "make",
    [
        RandomBlocks,
        Streaming,
        lambda: OnlineThreshold(upper=100.0, lower=1.0, noise=ZeroNoise()),
        lambda: MixedThreshold(upper=100.0, lower=1.0, noise=ZeroNoise()),
    ],
    ids=["random-blocks", "streaming", "online-threshold", "mixed-threshold"],
)
def test_two_unseeded_runs_choose_different_blocks(make: type[Scheduler]) -> None:
    """Without a seed the block order comes from OS entropy (it was seed 0 for every run, so
    every unseeded run made the same choices). Noise is held at zero for the threshold
    schedulers, so only the order can differ; 12 draws of 3 of 40 blocks collide with
    probability < 1e-30."""
    first, second = make(), make()
    assert first.seed is None and second.seed is None
    assert _log(_open_run(first)) != _log(_open_run(second))


@pytest.mark.parametrize("name", sorted(scheduler_classes()))
def test_seeded_runs_reproduce_and_say_secure_noise_false(name: str) -> None:
    cls = scheduler_classes()[name]
    shape = TaskShape.OPEN if TaskShape.OPEN in cls.shapes else TaskShape.NAMED
    accounting = Accounting.BASIC if cls.serves(Accounting.BASIC) else Accounting.RDP
    blocks, tasks = workload(5, accounting, shape, n_tasks=12)
    runs = [
        simulate(cls(seed=5, noise=SeededNoise(5)), blocks, tasks, accounting=accounting)
        for _ in range(2)
    ]
    assert _log(runs[0]) == _log(runs[1])
    assert all(r.secure_noise is False for r in runs)


def test_unseeded_noise_is_secure_and_a_seed_alone_only_fixes_public_choices() -> None:
    secure = OnlineThreshold()
    assert secure.secure_noise and secure.noise.secure
    assert _open_run(OnlineThreshold()).secure_noise is True
    # an explicit seed fixes the (data-independent) block order only; the comparisons' noise
    # stays OpenDP's unless a SeededNoise is passed as well.
    seeded_order = OnlineThreshold(seed=3)
    assert seeded_order.seed == 3 and seeded_order.secure_noise and seeded_order.noise.secure
    assert not OnlineThreshold(noise=SeededNoise(3)).secure_noise
    assert RandomBlocks(seed=3).rng.permutation(10).tolist() == (
        RandomBlocks(seed=3).rng.permutation(10).tolist()
    )
