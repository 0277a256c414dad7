"""What ends when a principal's access ends, and the re-check of a task's access.

A principal's tasks and reservations outlive the request that made them, so a change of its
rights must reach them:

* :func:`end_principal_work` — a principal disabled, deleted or given another role: every
  waiting, granted and running task of it is cancelled (its grants released, its pipelines
  stopped) and, when disabled or deleted, its open reservations are released. A role change
  cancels *all* its live tasks (as revoking one of its keys does): the tasks were checked
  against the rights of the old role, and re-deciding which of them the new role still allows
  would be a second, subtler access check; the principal submits again what it may still do.
* :func:`task_access` — defence in depth: the task queue asks it before it grants a task and
  before it runs one, and ``GET /v1/tasks/{id}`` before it shows a result, so that a task whose
  principal lost its role, its context binding or its right on the stream is cancelled (nothing
  charged) or its result withheld, even when the change was made by another process.

Example:
    >>> from blockbudget.service.auth import Permission, Principal, Role
    >>> ana = Principal("ana", Role.ANALYST, ("team-a",), (("flights", Permission.READ),))
    >>> lost_reason(ana, PrincipalState.ACTIVE, stream="flights", context="team-a") is None
    True
    >>> lost_reason(ana, PrincipalState.ACTIVE, stream="flights", context="team-b")
    "principal 'ana' is no longer bound to context 'team-b'"
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from blockbudget.errors import BlockBudgetError, UnknownBlockError
from blockbudget.ledger import ReservationState
from blockbudget.service.auth import KeyStore, Principal, PrincipalState, Role

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.tasks.model import Task
    from blockbudget.tasks.queue import TaskQueue

__all__ = ["end_principal_work", "lost_reason", "release_reservations", "task_access"]


def lost_reason(
    principal: Principal, state: PrincipalState, *, stream: str, context: str
) -> str | None:
    """Why ``principal`` (in ``state``) may no longer spend ``context`` on ``stream``; None if
    it still may (admins spend any context on any stream)."""
    name = principal.name
    if state is not PrincipalState.ACTIVE:
        return f"principal {name!r} is {state.value}"
    if principal.role is Role.ADMIN:
        return None
    if context not in principal.contexts:
        return f"principal {name!r} is no longer bound to context {context!r}"
    if principal.permission(stream) is None:
        return f"principal {name!r} may no longer read stream {stream!r}"
    return None


def task_access(keys: KeyStore) -> Callable[[Task], str | None]:
    """The check the task queue runs before granting or running a task, and the task route
    before showing a result: why the task's principal lost access (None: it has not). A task
    whose principal is not a service principal (the local CLI's, by name ``""`` or any name the
    key store never held) is the operator's and passes."""

    def check(task: Task) -> str | None:
        try:
            record = keys.standing(task.principal)
        except UnknownBlockError:
            return None
        return lost_reason(*record, stream=task.stream, context=task.context)

    return check


def release_reservations(platform: Platform, holder: str) -> list[str]:
    """Release every open reservation ``holder`` holds (it was disabled or deleted); the ids.
    Reads the open reservations once (an admin action, rare)."""
    out = []
    for res in platform.reservations(state=ReservationState.OPEN):
        if res.holder == holder:
            with contextlib.suppress(BlockBudgetError):  # closed or expired meanwhile
                platform.release(res.id)
                out.append(res.id)
    return out


def end_principal_work(
    queue: TaskQueue | None, platform: Platform | None, name: str, *, reservations: bool
) -> None:
    """Cancel every live task of ``name`` and, with ``reservations``, release its open
    reservations (the module docstring says when)."""
    if queue is not None:
        queue.revoke(name)
    if reservations and platform is not None:
        release_reservations(platform, name)
