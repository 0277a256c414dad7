"""The hooks of the task queue's work families (re-exported by
:mod:`blockbudget.tasks.decider`): a kind of work with its own scheduler, and one that decides
its tasks itself in pools of its own (the pipelines)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from blockbudget.tasks.model import Task, WorkKind
from blockbudget.tasks.selectors import Selector

if TYPE_CHECKING:
    from blockbudget.budget import Cost
    from blockbudget.platform import Platform
    from blockbudget.tasks.livepool import FeedBatch


class WorkFamily(Protocol):
    """A kind of work with its own scheduler (the hook for the pipeline family).

    Attributes:
        kind: the work kind it runs.
        family: the name its pools are keyed by (``"pipelines"``).
    """

    kind: WorkKind
    family: str

    def demand(self, platform: Platform, stream: str, work: Mapping[str, Any]) -> Cost:
        """Validate the work's config and price it (raises to refuse the submission)."""

    def selector(self, work: Mapping[str, Any]) -> Selector:
        """Which blocks the work may use."""

    def run(self, queue: Any, task: Task) -> Mapping[str, Any]:
        """Run the work on its grant (``task.reservation_id``); the result JSON."""

    def recover(self, queue: Any, task: Task) -> None:
        """A task left ``running`` by a dead leader (default: fail it, release its grant)."""


class DrivenFamily(WorkFamily, Protocol):
    """A family that decides its tasks itself, in pools of its own, on the queue's lock and
    rows (the pipelines: many runs while a task waits, each its own grant;
    :mod:`blockbudget.tasks.pipelines`). The leader calls these under its lock."""

    def enter(self, task: Task) -> None:
        """A waiting task (idempotent)."""

    def pump(self, batch: FeedBatch) -> None:
        """After the leader's own pools: sync with the feed's batch, decide, start work."""

    def cancel(self, task_id: str, *, note: str) -> bool:
        """Stop a task whose row was cancelled (its holds released at once)."""

    def step_down(self) -> None:
        """The leadership is lost: forget the pools."""

    def close(self) -> None:
        """Finish running work."""


def _driven(family: WorkFamily | None) -> DrivenFamily | None:
    return family if family is not None and hasattr(family, "pump") else None  # type: ignore[return-value]
