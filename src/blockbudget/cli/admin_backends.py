"""The two backends of ``blockbudget principal …``: a home folder (:class:`LocalAdmin`, the
operator's full rights) and a server (:class:`RemoteAdmin`, as the key's principal). Both answer
with the JSON forms of :mod:`blockbudget.service.admin_views`, so ``--json`` prints the same
document either way; both cancel a principal's tasks when its access ends or its role changes,
and release a disabled or deleted principal's reservations (the server through its routes, the
local backend on the task queue and ledger of the home). Both log every change as a
``blockbudget.admin`` JSON line; the local backend's actor is ``local:<OS user>``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from blockbudget.cli.common import load_pipelines, remote
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from pathlib import Path

    from blockbudget.service.auth import Role
    from blockbudget.service.client import ServiceClient
    from blockbudget.tasks.queue import TaskQueue

__all__ = ["AdminBackend", "LocalAdmin", "RemoteAdmin", "backend", "parse_role"]


class LocalAdmin:
    """The commands on a home folder (the operator's full rights)."""

    def __init__(self, home: Path, database: str | None) -> None:
        import os

        from blockbudget.platform import Platform
        from blockbudget.service.auth import KeyStore

        self.platform = Platform(
            home,
            database_url=database,
            data_root=os.environ.get("BLOCKBUDGET_DATA_ROOT") or None,
        )
        self.keys = KeyStore(self.platform.database)
        self.actor = f"local:{_os_user()}"

    def _log(self, action: str, target: str, **details: object) -> None:
        from blockbudget.service.admin_views import enable_admin_log, log_admin

        enable_admin_log()
        log_admin(self.actor, action, target, **details)

    def record(self, name: str) -> dict[str, Any]:
        from blockbudget.service.admin_views import principal_json

        return principal_json(self.keys.record(name), now=auth_now())

    def add(self, name: str, role: str, contexts: list[str]) -> dict[str, Any]:
        self._check_contexts(contexts)
        self.keys.add_principal(name, parse_role(role), contexts=tuple(contexts))
        key = self.keys.create_key(name)
        self._log("add_principal", name, role=role, key_id=_key_id(key))
        return {"principal": self.record(name), "api_key": key}

    def principals(self) -> list[dict[str, Any]]:
        return [self.record(p.name) for p in self.keys.principals()]

    def set_role(self, name: str, role: str) -> dict[str, Any]:
        before = self.keys.principal(name).role.value
        self.keys.set_role(name, parse_role(role))
        self._with_queue(lambda q: q.revoke(name))  # admitted under the old role
        self._log("set_role", name, role=role, was=before)
        return self.record(name)

    def set_contexts(self, name: str, contexts: list[str]) -> dict[str, Any]:
        self._check_contexts(contexts)
        before = self.keys.principal(name)
        after = self.keys.set_contexts(name, tuple(contexts))
        dropped = sorted(set(before.contexts) - set(after.contexts))
        self._log("set_contexts", name, contexts=list(after.contexts))
        if dropped and after.role.value != "admin":
            self._with_queue(lambda q: _unbind(q, name, dropped))
        return self.record(name)

    def set_state(self, name: str, state: str) -> dict[str, Any]:
        from blockbudget.service.auth import PrincipalState

        if state == "deleted":
            self.keys.delete_principal(name)
        else:
            self.keys.set_state(name, PrincipalState(state))
        if state != "active":
            from blockbudget.service.standing import release_reservations

            self._with_queue(lambda q: q.revoke(name))
            release_reservations(self.platform, name)
        self._log({"active": "enable", "disabled": "disable"}.get(state, "delete"), name)
        return self.record(name)

    def grant(self, name: str, stream: str, permission: str) -> dict[str, Any]:
        from blockbudget.service.auth import Permission

        try:
            perm = Permission(permission)
        except ValueError:
            raise InvalidRequestError(
                f"permission must be read or own, not {permission!r}"
            ) from None
        self.platform.stream(stream)
        self.keys.grant(name, stream, perm)
        self._log("grant", name, stream=stream, permission=perm.value)
        return self.record(name)

    def revoke(self, name: str, stream: str) -> dict[str, Any]:
        self.keys.revoke(name, stream)
        self._log("revoke", name, stream=stream)
        self._with_queue(lambda q: _cancel_on(q, name, stream))
        return self.record(name)

    def acl(self, stream: str) -> dict[str, Any]:
        from blockbudget.service.admin_views import acl_json

        self.platform.stream(stream)
        return acl_json(stream, self.keys.stream_access(stream))

    def key_create(self, name: str) -> dict[str, Any]:
        key = self.keys.create_key(name)
        self._log("create_key", name, key_id=_key_id(key))
        return {"principal": self.record(name), "api_key": key}

    def key_list(self, name: str) -> list[dict[str, Any]]:
        from blockbudget.service.admin_views import key_json

        now = auth_now()
        return [key_json(k, now=now) for k in self.keys.keys(name)]

    def key_revoke(self, name: str, key_id: str) -> dict[str, Any]:
        self.keys.revoke_key(key_id, principal=name)
        self._log("revoke_key", name, key_id=key_id)
        self._with_queue(lambda q: q.revoke(name))
        return self.record(name)

    def key_rotate(self, name: str, key_id: str, grace: float) -> dict[str, Any]:
        from blockbudget.service.admin_views import key_json
        from blockbudget.service.auth import split_key

        key, old = self.keys.rotate_key(key_id, principal=name, grace_seconds=grace)
        new_id = (split_key(key) or ("?", ""))[0]
        self._log("rotate_key", name, key_id=key_id, new_key_id=new_id, grace=grace)
        replaced = key_json(old, now=auth_now())
        return {"principal": name, "api_key": key, "key_id": new_id, "replaced": replaced}

    def _check_contexts(self, contexts: list[str]) -> None:
        unknown = sorted(set(contexts) - set(self.platform.contexts()))
        if unknown:
            raise InvalidRequestError(
                f"unknown context(s) {unknown} (or closed ones): register them first with "
                "`blockbudget context add NAME`"
            )

    def _with_queue(self, act: Callable[[TaskQueue], object]) -> None:
        """Cancel tasks as a server would when a principal's access ends."""
        from blockbudget.tasks.leader import leadership_for
        from blockbudget.tasks.queue import TaskQueue

        load_pipelines()  # the queue may resume a server's pipeline tasks
        engine = self.platform.database
        queue = TaskQueue(self.platform, leadership=leadership_for(engine, name="tasks"))
        try:
            act(queue)
        finally:
            queue.close()


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without one)
        return "unknown"


def _key_id(key: str) -> str:
    from blockbudget.service.auth import split_key

    return (split_key(key) or ("?", ""))[0]


def _unbind(queue: TaskQueue, name: str, contexts: list[str]) -> None:
    for t in queue.tasks(principal=name, limit=1_000_000):
        if t.context in contexts and t.state.value in ("waiting", "granted", "running"):
            _try_cancel(queue, t.id, "context unbound")


def _cancel_on(queue: TaskQueue, name: str, stream: str) -> None:
    for t in queue.tasks(principal=name, stream=stream, limit=1_000_000):
        if t.state.value in ("waiting", "granted", "running"):
            _try_cancel(queue, t.id, "access revoked")


def _try_cancel(queue: TaskQueue, task_id: str, by: str) -> None:
    from contextlib import suppress

    from blockbudget.errors import TaskStateError

    with suppress(InvalidRequestError, TaskStateError):  # it finished meanwhile
        queue.cancel(task_id, by=by, admin=True)


class RemoteAdmin:
    """The commands against a server, as the key's principal (an admin)."""

    def __init__(self, client: ServiceClient) -> None:
        self.client = client

    def _p(self, name: str) -> str:
        return f"/v1/principals/{quote(name, safe='')}"

    def record(self, name: str) -> dict[str, Any]:
        return dict(self.client.call("GET", self._p(name)))

    def add(self, name: str, role: str, contexts: list[str]) -> dict[str, Any]:
        key = self.client.add_principal(name, role, contexts)["api_key"]
        return {"principal": self.record(name), "api_key": key}

    def principals(self) -> list[dict[str, Any]]:
        return list(self.client.call("GET", "/v1/principals"))

    def set_role(self, name: str, role: str) -> dict[str, Any]:
        return dict(self.client.call("PUT", f"{self._p(name)}/role", json={"role": role}))

    def set_contexts(self, name: str, contexts: list[str]) -> dict[str, Any]:
        self.client.call("PUT", f"{self._p(name)}/contexts", json={"contexts": contexts})
        return self.record(name)

    def set_state(self, name: str, state: str) -> dict[str, Any]:
        if state == "deleted":
            return dict(self.client.call("DELETE", self._p(name)))
        action = "enable" if state == "active" else "disable"
        return dict(self.client.call("POST", f"{self._p(name)}/{action}"))

    def grant(self, name: str, stream: str, permission: str) -> dict[str, Any]:
        out = self.client.grant(name, stream, permission)
        return out if "permission" in out else self.record(name)

    def revoke(self, name: str, stream: str) -> dict[str, Any]:
        path = f"{self._p(name)}/streams/{quote(stream, safe='')}"
        out = dict(self.client.call("DELETE", path))
        return out if "permission" in out else self.record(name)

    def acl(self, stream: str) -> dict[str, Any]:
        return dict(self.client.call("GET", f"/v1/streams/{quote(stream, safe='')}/acl"))

    def key_create(self, name: str) -> dict[str, Any]:
        key = self.client.call("POST", f"{self._p(name)}/keys")["api_key"]
        return {"principal": self.record(name), "api_key": key}

    def key_list(self, name: str) -> list[dict[str, Any]]:
        return list(self.client.call("GET", f"{self._p(name)}/keys"))

    def key_revoke(self, name: str, key_id: str) -> dict[str, Any]:
        self.client.call("DELETE", f"{self._p(name)}/keys/{quote(key_id, safe='')}")
        return self.record(name)

    def key_rotate(self, name: str, key_id: str, grace: float) -> dict[str, Any]:
        path = f"{self._p(name)}/keys/{quote(key_id, safe='')}/rotate"
        return dict(self.client.call("POST", path, json={"grace_seconds": grace}))


def auth_now() -> float:
    """The time keys expire against (:func:`blockbudget.service.auth.now`)."""
    from blockbudget.service import auth

    return auth.now()


AdminBackend = LocalAdmin | RemoteAdmin


def backend(
    home: Path, database: str | None, server: str | None, api_key: str | None
) -> AdminBackend:
    client = remote(server, api_key)
    return RemoteAdmin(client) if client is not None else LocalAdmin(home, database)


def parse_role(value: str) -> Role:
    from blockbudget.service.auth import Role

    try:
        return Role(value)
    except ValueError:
        raise InvalidRequestError(f"role must be admin, owner or analyst, not {value!r}") from None
