"""Executors: where a pipeline run happens — in this process, or on a Ray cluster.

One interface (:class:`Executor`), one contract test suite. A :class:`PipelineJob` is a
pipeline plus the (ε, δ, η) and seed of one iteration; an executor runs it against a
:class:`~blockbudget.grant.Grant`:

* :class:`InProcessExecutor` (default) calls the pipeline on the grant itself.
* :class:`RayExecutor` ships the job and a :class:`GrantHandle` to a Ray worker — the grant's
  part files (paths and the data root's URI), its projection and the engine's name, never its
  rows. The worker opens its own :class:`~blockbudget.ledger.Ledger` on the platform's
  database (SQLite file on one machine, PostgreSQL on a cluster), rebuilds a grant on the same
  reservation and reads the part files itself (on S3, with a filesystem rebuilt from the URI
  and the worker's own credentials), so every draw it makes is the same durable ledger charge,
  made before the noise, as in-process (no overspend and secure noise: invariants 1 and 7 in
  docs/architecture.md). The driver keeps the original grant and closes it, releasing what the
  worker did not draw.

With a seed, the same job gives the same release on either executor (tested); without one, each
run draws fresh OS entropy wherever it runs, so no two releases share their noise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from blockbudget.accounting import Accounting
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource, SeededNoise

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from blockbudget.engine import ScanSource
    from blockbudget.grant import Grant
    from blockbudget.ledger import Ledger
    from blockbudget.mechanisms.source import BudgetSource
    from blockbudget.store.rollback import Watermark
    from blockbudget.training.pipeline import Pipeline, PipelineRun


@dataclass(frozen=True)
class PipelineJob:
    """One iteration of a pipeline, ready to run anywhere (picklable).

    Attributes:
        pipeline: the pipeline.
        epsilon, delta: the iteration's budget.
        eta: the validator's confidence for this iteration.
        seed: seeds the train/test split, the training randomness and the noise (SeededNoise:
            experiments and tests only); None means secure noise and fresh OS entropy for
            every randomized stage (and split key 0, which is public by design).
        iteration: the iteration number (varies the seeded noise between iterations).
    """

    pipeline: Pipeline
    epsilon: Decimal
    delta: Decimal
    eta: float
    seed: int | None = None
    iteration: int = 1

    def noise(self) -> NoiseSource | None:
        """SeededNoise derived from (seed, iteration), or None (secure)."""
        if self.seed is None:
            return None
        return SeededNoise(self.seed * 1_000_003 + self.iteration)

    def execute(self, source: BudgetSource, frame: Any) -> PipelineRun:
        """Run the pipeline on ``frame`` drawing from ``source``."""
        return self.pipeline.run(
            source,
            frame,
            epsilon=self.epsilon,
            delta=self.delta,
            eta=self.eta,
            noise=self.noise(),
            seed=None if self.seed is None else self.seed + self.iteration,
        )


@dataclass(frozen=True)
class GrantHandle:
    """What a remote worker needs to draw on a driver's grant and read its blocks: no rows, no
    connection, no filesystem object (so no credentials travel).

    Attributes:
        database_url: the platform's ledger database.
        stream, reservation_id, accounting, group_size: the grant's identity and rule.
        source: the grant's part files with no filesystem object: the worker rebuilds it from
            :attr:`ScanSource.uri` (local paths are absolute and need none).
        columns: the grant's projection.
        schema: the projection's Arrow types (so an empty read keeps them).
        engine: the registry name of the engine the worker reads with.
        mark_every: the driver's high-water mark policy (:mod:`blockbudget.store.rollback`):
            the worker's ledger keeps the mark beside the data root as the driver's does, so
            that its draws are under the mark before its run goes back (None: no mark).
    """

    database_url: str
    stream: str
    reservation_id: str
    accounting: Accounting
    group_size: int
    source: ScanSource
    columns: tuple[str, ...]
    schema: pa.Schema | None
    engine: str
    mark_every: str | None = None

    @classmethod
    def of(cls, grant: Grant, *, database_url: str) -> GrantHandle:
        """The handle of ``grant``.

        Raises:
            InvalidRequestError: the grant's files live on an in-memory filesystem
                (``mock://``) that no other process can reach, or its engine is not one a
                worker can create by name.
        """
        from blockbudget.engine import engine_names

        source = grant.source
        engine = worker_engine(grant.engine.name)
        if engine not in engine_names():
            raise InvalidRequestError(
                f"a worker creates its engine by registry name, and {engine!r} is not "
                f"registered (known: {engine_names()})"
            )
        if source.uri.startswith("mock:"):
            raise InvalidRequestError(
                f"Ray workers cannot read blocks on the in-memory filesystem {source.uri!r}; "
                "use a local folder or an object store as the data root"
            )
        return cls(
            database_url=database_url,
            stream=grant.stream,
            reservation_id=grant.reservation.id,
            accounting=grant.accounting,
            group_size=grant.group_size,
            source=replace(source, filesystem=None),
            columns=grant.columns,
            schema=grant.schema,
            engine=engine,
            mark_every=grant.mark_policy,
        )


def worker_engine(name: str) -> str:
    """The engine a worker reads with: the grant's, except that a worker inside a Ray task
    reads with the reference engine rather than start a Ray Data job of its own."""
    return "arrow" if name == "ray" else name


def attach_filesystem(source: ScanSource) -> ScanSource:
    """``source`` with its filesystem rebuilt from its URI, in this process (a local data
    root needs none: its base path is absolute)."""
    if "://" not in source.uri:
        return source
    import pyarrow.fs as pafs

    filesystem, base = pafs.FileSystem.from_uri(source.uri)
    return replace(source, filesystem=filesystem, base=base.rstrip("/"))


def run_remote(job: PipelineJob, handle: GrantHandle) -> PipelineRun:
    """Worker side: rebuild a grant on the handle's reservation, read its part files here and
    run the job.

    The rebuilt grant is never closed here (closing would release the driver's reservation);
    only its ledger connection and its engine are disposed.
    """
    from blockbudget.engine import get_engine
    from blockbudget.grant import Grant
    from blockbudget.ledger import Ledger

    engine = get_engine(handle.engine)
    try:
        ledger = Ledger(handle.database_url)
        watermark = _guard(ledger, handle)
        try:
            grant = Grant(
                ledger=ledger,
                stream=handle.stream,
                reservation=ledger.reservation(handle.reservation_id),
                accounting=handle.accounting,
                source=attach_filesystem(handle.source),
                engine=engine,
                columns=handle.columns,
                schema=handle.schema,
                group_size=handle.group_size,
            )
            # with the default policy each draw is under the mark before it returns (a mark
            # that cannot be written fails the draw); a batched policy's go under it on close
            return job.execute(grant, grant.frame())
        finally:
            if watermark is not None:
                watermark.close()
            ledger.dispose()
    finally:
        engine.close()


def _guard(ledger: Ledger, handle: GrantHandle) -> Watermark | None:
    """Guard a worker's ledger with the driver's high-water mark (beside the data root)."""
    if handle.mark_every is None:
        return None
    from blockbudget.store.files import DataFiles
    from blockbudget.store.markfiles import MarkFiles
    from blockbudget.store.rollback import Watermark
    from blockbudget.store.watermark import parse_policy

    source = handle.source
    root = source.uri if "://" in source.uri or not source.base else source.base
    return Watermark(ledger, MarkFiles(DataFiles(root)), policy=parse_policy(handle.mark_every))


class Executor(ABC):
    """Runs pipeline jobs against grants."""

    @abstractmethod
    def run_many(self, work: Sequence[tuple[PipelineJob, Grant]]) -> list[PipelineRun]:
        """Run each (job, grant) pair; results in the same order. A job's error is raised."""

    def run(self, job: PipelineJob, grant: Grant) -> PipelineRun:
        """Run one job."""
        return self.run_many([(job, grant)])[0]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the executor's resources."""


class InProcessExecutor(Executor):
    """Runs jobs one after the other in this process (the default)."""

    def run_many(self, work: Sequence[tuple[PipelineJob, Grant]]) -> list[PipelineRun]:
        return [job.execute(grant, grant.frame()) for job, grant in work]


class RayExecutor(Executor):
    """Runs jobs as Ray tasks, in parallel.

    Args:
        database_url: the platform's ledger database (``platform.database_url``); workers
            connect to it to charge their draws.
        address: a Ray cluster address; None starts (or reuses) a local Ray.
        num_cpus: CPUs for a local Ray started here.
    """

    def __init__(
        self, *, database_url: str, address: str | None = None, num_cpus: int | None = None
    ) -> None:
        import ray

        if not isinstance(database_url, str) or not database_url:
            raise InvalidRequestError("RayExecutor needs the platform's database_url")
        if database_url.startswith("sqlite://") and ":memory:" in database_url:
            raise InvalidRequestError("Ray workers cannot reach an in-memory SQLite ledger")
        self.database_url = database_url
        self._started = False
        if not ray.is_initialized():
            ray.init(
                address=address,
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self._started = True
        self._remote = ray.remote(run_remote)

    def run_many(self, work: Sequence[tuple[PipelineJob, Grant]]) -> list[PipelineRun]:
        """Run each job on a Ray worker that charges the grant's ledger.

        Raises:
            InvalidRequestError: a grant is backed by another ledger database than the one this
                executor's workers connect to, or its files by an in-memory filesystem
                (nothing is submitted, nothing charged).
        """
        import ray

        mine = same_database_key(self.database_url)
        for _, grant in work:
            if same_database_key(grant.ledger_url) != mine:
                raise InvalidRequestError(
                    f"grant on stream {grant.stream!r} is backed by the ledger at "
                    f"{grant.ledger_url}, but this RayExecutor's workers charge "
                    f"{make_url(self.database_url).render_as_string(hide_password=True)}; "
                    "nothing was submitted"
                )
        handles = [GrantHandle.of(grant, database_url=self.database_url) for _, grant in work]
        refs = [
            self._remote.remote(job, handle) for (job, _), handle in zip(work, handles, strict=True)
        ]
        return list(ray.get(refs))

    def close(self) -> None:
        """Shut Ray down if this executor started it."""
        import ray

        if self._started and ray.is_initialized():
            ray.shutdown()
        self._started = False


def same_database_key(url: str) -> str:
    """A comparable form of a database URL: password hidden, SQLite file paths resolved."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        parsed = parsed.set(drivername="sqlite", database=str(Path(parsed.database).resolve()))
    return parsed.render_as_string(hide_password=True)
