"""The executor contract: a seeded job gives the same release in-process and on Ray, every
draw a worker makes is a ledger charge on the driver's reservation, and the rest is released."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from blockbudget.apps.flights.features import Granularity
from blockbudget.apps.flights.pipelines import AverageSpeedPipeline, regression_pipeline
from blockbudget.errors import InvalidRequestError
from blockbudget.grant import Grant
from blockbudget.platform import Platform
from blockbudget.training import (
    Executor,
    InProcessExecutor,
    PipelineJob,
    RayExecutor,
)
from blockbudget.training.executors import GrantHandle

from .conftest import CONTEXT, STREAM, make_platform


@pytest.fixture(scope="module")
def ray_executor(
    tmp_path_factory: pytest.TempPathFactory, s3_server: object
) -> Iterator[RayExecutor]:
    """One small local Ray for the module (starting Ray costs seconds); started after the
    local S3 server, so that its workers inherit the server's dummy credentials."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        home = tmp_path_factory.mktemp("ray-platform")
        executor = RayExecutor(
            database_url=f"sqlite:///{(home / 'platform.db').resolve()}", num_cpus=1
        )
    yield executor
    executor.close()


JOBS = [
    PipelineJob(regression_pipeline(target=0.004), Decimal("0.5"), Decimal("1e-6"), 0.05, seed=7),
    PipelineJob(
        AverageSpeedPipeline(target=300.0, granularity=Granularity.WEEK_OF_MONTH),
        Decimal("0.25"),
        Decimal(0),
        0.05,
        seed=8,
    ),
]


def run_all(platform: Platform, executor: Executor) -> list[object]:
    return run_all_jobs(platform, executor, JOBS)


def run_all_jobs(platform: Platform, executor: Executor, jobs: list[PipelineJob]) -> list[object]:
    grants = [
        platform.request(
            STREAM,
            blocks=[b.block_id for b in platform.blocks(STREAM)],
            budget=job_budget(job),
            context=CONTEXT,
        )
        for job in jobs
    ]
    try:
        runs = executor.run_many(list(zip(jobs, grants, strict=True)))
    finally:
        for g in grants:
            g.close()
    return runs


def job_budget(job: PipelineJob) -> object:
    from blockbudget.budget import Budget

    return Budget(epsilon=job.epsilon, delta=job.delta)


def summary(run: object) -> tuple[object, ...]:
    model = run.model  # type: ignore[attr-defined]
    params = tuple(np.round(model.coef_, 12)) if hasattr(model, "coef_") else model.value.means
    v = run.validation  # type: ignore[attr-defined]
    return (params, v.outcome, v.accept_bound, v.cost, run.n_train, run.n_test)  # type: ignore[attr-defined]


def test_ray_gives_the_same_releases_as_in_process(
    tmp_path: Path, ray_executor: RayExecutor
) -> None:
    local = make_platform(tmp_path / "local", 3)
    ray_home = Path(ray_executor.database_url.removeprefix("sqlite:///")).parent
    remote = make_platform(ray_home, 3)
    try:
        in_process = run_all(local, InProcessExecutor())
        on_ray = run_all(remote, ray_executor)
        assert [summary(r) for r in on_ray] == [summary(r) for r in in_process]
        # the workers' draws landed in the driver's ledger, and nothing stays reserved
        for p in (local, remote):
            states = p.ledger.states(stream=STREAM, context=CONTEXT)
            assert all(any(s.charged) and not any(s.reserved) for s in states)
            assert p.verify().ok
        charged = lambda p: [s.charged for s in p.ledger.states(stream=STREAM, context=CONTEXT)]  # noqa: E731
        assert charged(local) == charged(remote)
    finally:
        local.close()
        remote.close()


def test_ray_refuses_an_in_memory_ledger(ray_executor: RayExecutor) -> None:
    with pytest.raises(InvalidRequestError, match="in-memory"):
        RayExecutor(database_url="sqlite:///:memory:")


def test_ray_refuses_a_grant_from_another_ledger(tmp_path: Path, ray_executor: RayExecutor) -> None:
    """A grant backed by a different database than the workers' is refused before submission,
    so a worker can never charge a copy of the ledger; nothing is charged."""
    other = make_platform(tmp_path / "other", 2)
    try:
        grant = other.request(
            STREAM,
            blocks=[b.block_id for b in other.blocks(STREAM)],
            budget=job_budget(JOBS[1]),
            context=CONTEXT,
        )
        with pytest.raises(InvalidRequestError, match="nothing was submitted"):
            ray_executor.run_many([(JOBS[1], grant)])
        grant.close()
        states = other.ledger.states(stream=STREAM, context=CONTEXT)
        assert not any(any(s.charged) or any(s.reserved) for s in states)
    finally:
        other.close()


def test_a_ray_worker_reads_the_part_files_itself(
    tmp_path: Path, ray_executor: RayExecutor, s3_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver sends the worker the grant's part files on S3, not its rows: the handle is a
    few hundred bytes and holds no filesystem object, the driver's grant never reads (its
    reading methods raise here), and the worker's release is the in-process one."""
    local = make_platform(tmp_path / "local", 3)
    remote = make_platform(tmp_path / "s3", 3, data_root=s3_root)
    executor = RayExecutor(database_url=remote.database_url)  # joins the module's Ray
    try:
        (expected,) = run_all_jobs(local, InProcessExecutor(), JOBS[1:])
        grant = remote.request(
            STREAM,
            blocks=[b.block_id for b in remote.blocks(STREAM)],
            budget=job_budget(JOBS[1]),
            context=CONTEXT,
        )
        handle = GrantHandle.of(grant, database_url=remote.database_url)
        assert handle.source.filesystem is None and handle.source.uri == s3_root
        assert handle.source.rows > 2000 and len(pickle.dumps(handle)) < 4096

        def no_rows_on_the_driver(*args: object, **kwargs: object) -> None:
            raise AssertionError("the driver read the granted rows")

        for name in ("frame", "batches", "data", "num_rows"):
            monkeypatch.setattr(Grant, name, property(no_rows_on_the_driver))
        with grant:
            (run,) = executor.run_many([(JOBS[1], grant)])
        monkeypatch.undo()
        assert summary(run) == summary(expected)
        states = remote.ledger.states(stream=STREAM, context=CONTEXT)
        assert all(any(s.charged) and not any(s.reserved) for s in states)
    finally:
        executor.close()
        local.close()
        remote.close()


def test_ray_refuses_blocks_on_an_in_memory_filesystem(
    tmp_path: Path, ray_executor: RayExecutor
) -> None:
    home = tmp_path / "mock"
    platform = make_platform(home, 1, data_root="mock://")
    executor = RayExecutor(database_url=platform.database_url)
    try:
        with (
            platform.request(
                STREAM,
                blocks=[b.block_id for b in platform.blocks(STREAM)],
                budget=job_budget(JOBS[1]),
                context=CONTEXT,
            ) as grant,
            pytest.raises(InvalidRequestError, match="in-memory filesystem"),
        ):
            executor.run_many([(JOBS[1], grant)])
        states = platform.ledger.states(stream=STREAM, context=CONTEXT)
        assert not any(any(s.charged) or any(s.reserved) for s in states)
    finally:
        executor.close()
        platform.close()


def test_a_handle_needs_an_engine_a_worker_can_create_by_name(tmp_path: Path) -> None:
    from blockbudget.engine.arrow_engine import ArrowEngine

    class Unregistered(ArrowEngine):
        name = "unregistered"

    platform = make_platform(tmp_path / "p", 1, engine=Unregistered())
    try:
        with (
            platform.request(
                STREAM,
                blocks=[b.block_id for b in platform.blocks(STREAM)],
                budget=job_budget(JOBS[1]),
                context=CONTEXT,
            ) as grant,
            pytest.raises(InvalidRequestError, match="not registered"),
        ):
            GrantHandle.of(grant, database_url=platform.database_url)
    finally:
        platform.close()
