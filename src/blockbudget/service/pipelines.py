"""Pipeline submission and status: Sage's privacy-adaptive training as a service queue.

A principal submits a pipeline (one of :data:`KINDS`, from :mod:`blockbudget.training`) on a
stream it may read, in a context it is bound to. A single worker thread per server process runs
the queue in submission order: each job is an
:class:`~blockbudget.training.adaptive.AdaptiveTrainer` (seed ``004_2b5d216070ae2ded.txt``
§3.3): it requests a grant on its window, trains and validates, and on RETRY doubles ε or waits
for more blocks. Every draw goes through the ledger before noise, as everywhere.

States shown to users and on the dashboard: ``queued`` (not started), ``training`` (iterations
run), ``waiting`` (it needs new blocks or budget — after a RETRY with no budget left to double
ε, or before its first window exists; it is tried again when new blocks arrive),
``accepted`` (the model is released), ``rejected``, ``timed_out``, ``failed``. A failed job
shows a stable code and a message written here (``pipeline_failed_data``,
``pipeline_failed_budget``, ``pipeline_failed_internal``) — never the exception's text, which
may quote a cell of the data; the traceback goes to the server log only, under the job's id
(:mod:`blockbudget.service.failures`). Released models are DP outputs and are shown; exact row
counts are not.

Jobs live in the memory of the server process that accepted them (a restart forgets the queue;
what they charged stays in the ledger). With several server processes each runs its own queue.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.platform import Platform
from blockbudget.service.failures import Failure, failure_of, log

#: Pipeline kinds offered over HTTP: name → what it trains (each attempt's outcome is the
#: validator's ACCEPT / REJECT / RETRY).
KINDS: dict[str, str] = {
    "average-speed": "average speed per hour of day (dp_group_by_mean, sum-statistic validator)",
    "adassp-regression": "air-time linear regression (AdaSSP, loss validator)",
}

_FLIGHT_COLUMNS = (
    "month",
    "day",
    "hour",
    "origin",
    "carrier",
    "distance",
    "air_time",
    "dep_delay",
    "arr_delay",
    "sched_dep_datetime",
)


def build_pipeline(kind: str, target: float) -> Any:
    """The :class:`~blockbudget.training.pipeline.Pipeline` of ``kind`` with its target."""
    from blockbudget.training import AdaSSPPipeline, AverageSpeedPipeline

    if kind == "average-speed":
        return AverageSpeedPipeline(target=target)
    if kind == "adassp-regression":
        return AdaSSPPipeline(target=target)
    raise InvalidRequestError(f"unknown pipeline kind {kind!r}; one of {sorted(KINDS)}")


@dataclass
class Job:
    """One submitted pipeline and what became of it."""

    id: str
    owner: str
    stream: str
    context: str
    kind: str
    target: float
    epsilon0: float
    max_epsilon: float
    min_window: int
    submitted_at: float
    state: str = "queued"
    error: Failure | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    trainer: Any = None
    blocks_seen: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "stream": self.stream,
            "context": self.context,
            "kind": self.kind,
            "target": self.target,
            "state": self.state,
            "error": None if self.error is None else self.error.to_json(),
            "attempts": list(self.attempts),
            "model": self.model,
            "submitted_at": self.submitted_at,
        }


class PipelineQueue:
    """The per-process queue and its worker (see the module docstring).

    Args:
        platform: the platform the pipelines run on.
        poll_seconds: how often a waiting job is looked at again.
    """

    def __init__(self, platform: Platform, *, poll_seconds: float = 1.0) -> None:
        self._platform = platform
        self._jobs: dict[str, Job] = {}
        self._order: list[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._poll = poll_seconds
        self._thread: threading.Thread | None = None
        self._stop = False

    def submit(
        self,
        *,
        owner: str,
        stream: str,
        context: str,
        kind: str,
        target: float,
        epsilon0: float,
        max_epsilon: float,
        min_window: int,
    ) -> Job:
        """Queue a pipeline; everything is validated now, so a bad job is refused at once.

        Raises:
            InvalidRequestError: an unknown kind, a bad configuration, or a stream without the
                columns the pipeline reads.
        """
        from blockbudget.training import AdaptiveConfig

        build_pipeline(kind, target)
        AdaptiveConfig(epsilon0=epsilon0, max_epsilon=max_epsilon, min_window=min_window)
        schema = self._platform.store.schema(stream)
        missing = [c for c in _FLIGHT_COLUMNS if schema is None or c not in schema.names]
        if missing:
            raise InvalidRequestError(
                f"pipeline {kind!r} reads the flights columns; stream {stream!r} lacks {missing}"
            )
        job = Job(
            id=f"job-{uuid.uuid4().hex[:16]}",
            owner=owner,
            stream=stream,
            context=context,
            kind=kind,
            target=target,
            epsilon0=epsilon0,
            max_epsilon=max_epsilon,
            min_window=min_window,
            submitted_at=time.time(),
        )
        with self._lock:
            self._jobs[job.id] = job
            self._order.append(job.id)
        self._ensure_worker()
        self._wake.set()
        return job

    def job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise UnknownBlockError(f"unknown pipeline job {job_id!r}") from None

    def jobs(self, visible: Callable[[Job], bool] = lambda _: True) -> list[Job]:
        with self._lock:
            return [self._jobs[i] for i in self._order if visible(self._jobs[i])]

    def close(self) -> None:
        """Stop the worker after the iteration it is running (jobs keep their state)."""
        with self._lock:
            self._stop = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=30)

    # --- the worker --------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop = False  # a queue closed by a server's shutdown restarts on submit
                self._thread = threading.Thread(
                    target=self._loop, name="blockbudget-pipelines", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while not self._stop:
            ran = False
            for job in self.jobs(lambda j: j.state in ("queued", "waiting")):
                if self._stop:
                    return
                if job.state == "waiting":
                    n = len(self._platform.store.blocks(job.stream))
                    if n == job.blocks_seen:
                        continue  # nothing new since it last waited
                ran = True
                self._advance(job)
            if not ran:
                self._wake.wait(self._poll)
                self._wake.clear()

    def _advance(self, job: Job) -> None:
        from blockbudget.training import AdaptiveConfig, AdaptiveTrainer, Status

        try:
            if job.trainer is None:
                job.trainer = AdaptiveTrainer(
                    platform=self._platform,
                    stream=job.stream,
                    pipeline=build_pipeline(job.kind, job.target),
                    context=job.context,
                    config=AdaptiveConfig(
                        epsilon0=job.epsilon0,
                        max_epsilon=job.max_epsilon,
                        min_window=job.min_window,
                    ),
                    columns=_FLIGHT_COLUMNS,
                )
            job.state = "training"
            job.blocks_seen = len(self._platform.store.blocks(job.stream))
            status = job.trainer.step()
        except Exception as exc:  # a data problem or a pipeline bug must not kill the queue
            # Nothing of the exception's text leaves the service: it may quote a cell.
            log.error(
                "pipeline job %s (%s on stream %r) failed",
                job.id,
                job.kind,
                job.stream,
                exc_info=exc,
            )
            job.state, job.error = "failed", failure_of(exc, what="pipeline", ref=job.id)
            return
        job.attempts = [
            {
                "iteration": a.iteration,
                "epsilon": str(a.epsilon),
                "delta": str(a.delta),
                "blocks": len(a.blocks),
                "outcome": a.outcome.value.upper(),
            }
            for a in job.trainer.search.attempts
        ]
        if status is Status.ACCEPTED:
            job.state = "accepted"
            job.model = _describe(job.trainer.model)
        elif status is Status.WAITING:
            job.state = "waiting"
        else:
            job.state = status.value


def _describe(model: Any) -> str:
    """A short public description of a released (DP) model."""
    for attr in ("coef_", "coefficients", "means", "value"):
        value = getattr(model, attr, None)
        if value is not None:
            text = repr(value)
            return f"{type(model).__name__}: {attr}={text[:400]}"
    return repr(model)[:400]
