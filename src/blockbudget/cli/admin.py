"""``blockbudget principal …``: principals, API keys, roles, context bindings and stream access.

Every command works on a home folder (``--home``; the database in ``$BLOCKBUDGET_DATABASE``
when set) or against a server as an admin (``--server URL --api-key KEY``), and prints the same
JSON document either way with ``--json`` (:mod:`blockbudget.service.admin_views`: times in
ISO 8601 UTC, key ids but never a secret except the one a command has just issued).

Locally the command is the operator's, with the database's full rights; on a server the key's
principal must be an admin (a stream's owner may grant and revoke *read* on its streams).
Disabling, deleting and revoking a key cancel the principal's active tasks, locally as on a
server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
from rich.markup import escape
from rich.table import Table

from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    console,
    emit_json,
    handle_errors,
    principal_app,
    remote,
)
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from pathlib import Path

    from blockbudget.service.auth import Role
    from blockbudget.service.client import ServiceClient
    from blockbudget.tasks.queue import TaskQueue

key_app = typer.Typer(help="API keys: create, list, revoke, rotate.", no_args_is_help=True)
principal_app.add_typer(key_app, name="key")

DatabaseOpt = Annotated[
    str | None,
    typer.Option(envvar="BLOCKBUDGET_DATABASE", help="SQLAlchemy URL of the ledger database."),
]
ContextsOpt = Annotated[
    list[str] | None, typer.Option("--context", help="Context(s) the principal may spend in.")
]


class _Local:
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
        self.keys = KeyStore(self.platform.ledger.engine)

    def record(self, name: str) -> dict[str, Any]:
        from blockbudget.service.admin_views import principal_json

        return principal_json(self.keys.record(name), now=auth_now())

    def add(self, name: str, role: str, contexts: list[str]) -> dict[str, Any]:
        self._check_contexts(contexts)
        self.keys.add_principal(name, _role(role), contexts=tuple(contexts))
        key = self.keys.create_key(name)
        return {"principal": self.record(name), "api_key": key}

    def principals(self) -> list[dict[str, Any]]:
        return [self.record(p.name) for p in self.keys.principals()]

    def set_role(self, name: str, role: str) -> dict[str, Any]:
        self.keys.set_role(name, _role(role))
        return self.record(name)

    def set_contexts(self, name: str, contexts: list[str]) -> dict[str, Any]:
        self._check_contexts(contexts)
        before = self.keys.principal(name)
        after = self.keys.set_contexts(name, tuple(contexts))
        dropped = sorted(set(before.contexts) - set(after.contexts))
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
            self._with_queue(lambda q: q.revoke(name))
        return self.record(name)

    def grant(self, name: str, stream: str, permission: str) -> dict[str, Any]:
        from blockbudget.service.auth import Permission

        try:
            perm = Permission(permission)
        except ValueError:
            raise typer.BadParameter(
                f"permission must be read or own, not {permission!r}"
            ) from None
        self.platform.stream(stream)
        self.keys.grant(name, stream, perm)
        return self.record(name)

    def revoke(self, name: str, stream: str) -> dict[str, Any]:
        self.keys.revoke(name, stream)
        self._with_queue(lambda q: _cancel_on(q, name, stream))
        return self.record(name)

    def acl(self, stream: str) -> dict[str, Any]:
        from blockbudget.service.admin_views import acl_json

        self.platform.stream(stream)
        return acl_json(stream, self.keys.stream_access(stream))

    def key_create(self, name: str) -> dict[str, Any]:
        key = self.keys.create_key(name)
        return {"principal": self.record(name), "api_key": key}

    def key_list(self, name: str) -> list[dict[str, Any]]:
        from blockbudget.service.admin_views import key_json

        now = auth_now()
        return [key_json(k, now=now) for k in self.keys.keys(name)]

    def key_revoke(self, name: str, key_id: str) -> dict[str, Any]:
        self.keys.revoke_key(key_id, principal=name)
        self._with_queue(lambda q: q.revoke(name))
        return self.record(name)

    def key_rotate(self, name: str, key_id: str, grace: float) -> dict[str, Any]:
        from blockbudget.service.admin_views import key_json
        from blockbudget.service.auth import split_key

        key, old = self.keys.rotate_key(key_id, principal=name, grace_seconds=grace)
        new_id = (split_key(key) or ("?", ""))[0]
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

        engine = self.platform.ledger.engine
        queue = TaskQueue(self.platform, leadership=leadership_for(engine, name="tasks"))
        try:
            act(queue)
        finally:
            queue.close()


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


class _Remote:
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


def _backend(
    home: Path, database: str | None, server: str | None, api_key: str | None
) -> _Local | _Remote:
    client = remote(server, api_key)
    return _Remote(client) if client is not None else _Local(home, database)


def _role(value: str) -> Role:
    from blockbudget.service.auth import Role

    try:
        return Role(value)
    except ValueError:
        raise typer.BadParameter(f"role must be admin, owner or analyst, not {value!r}") from None


def _when(text: str | None) -> str:
    """An ISO 8601 UTC time as a table shows it."""
    return "" if text is None else text.replace("T", " ").replace("Z", " UTC")


def _print_record(doc: dict[str, Any]) -> None:
    console.print(
        f"principal [bold]{escape(doc['name'])}[/] ({doc['role']}, {doc['state']}), created "
        f"{_when(doc['created'])}; contexts: {escape(', '.join(doc['contexts']) or 'none')}",
        soft_wrap=True,
    )
    streams = ", ".join(f"{s} ({p})" for s, p in sorted(doc["streams"].items()))
    console.print(f"streams: {escape(streams or 'none')}", soft_wrap=True)
    _print_keys(doc["keys"])


def _print_keys(keys: list[dict[str, Any]]) -> None:
    table = Table("key id", "created", "expires", "state")
    for k in keys:
        state = "active" if k["active"] else "revoked" if k["revoked"] else "expired"
        table.add_row(k["key_id"], _when(k["created"]), _when(k["expires"]), state)
    console.print(table)


def _out(as_json: bool, doc: object, line: str) -> None:
    if as_json:
        emit_json(doc)
    else:
        console.print(line, soft_wrap=True)


# --- principals ---------------------------------------------------------------------------------


@principal_app.command("add")
@handle_errors
def principal_add(
    name: str,
    role: Annotated[str, typer.Option(help="admin, owner or analyst.")] = "analyst",
    context: ContextsOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a principal and print its first API key (shown once, stored hashed)."""
    doc = _backend(home, database, server, api_key).add(name, role, list(context or []))
    line = f"principal [bold]{escape(name)}[/] ({role}); API key (shown once): {doc['api_key']}"
    _out(as_json, doc, line)


@principal_app.command("list")
@handle_errors
def principal_list(
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List principals: role, state, bound contexts, stream access, key ids (never secrets)."""
    docs = _backend(home, database, server, api_key).principals()
    if as_json:
        emit_json(docs)
        return
    table = Table("principal", "role", "state", "contexts", "streams", "active keys", "created")
    for d in docs:
        streams = ", ".join(f"{s} ({p})" for s, p in sorted(d["streams"].items()))
        active = ", ".join(k["key_id"] for k in d["keys"] if k["active"])
        table.add_row(
            escape(d["name"]),
            d["role"],
            d["state"],
            escape(", ".join(d["contexts"])),
            escape(streams),
            active,
            _when(d["created"]),
        )
    console.print(table)


@principal_app.command("show")
@handle_errors
def principal_show(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one principal with its keys."""
    doc = _backend(home, database, server, api_key).record(name)
    if as_json:
        emit_json(doc)
    else:
        _print_record(doc)


@principal_app.command("role")
@handle_errors
def principal_role(
    name: str,
    role: Annotated[str, typer.Argument(help="admin, owner or analyst.")],
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a principal's role (its contexts and stream access are kept)."""
    _role(role)
    doc = _backend(home, database, server, api_key).set_role(name, role)
    _out(as_json, doc, f"principal [bold]{escape(name)}[/] is now {role}")


@principal_app.command("contexts")
@handle_errors
def principal_contexts(
    name: str,
    context: ContextsOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bind a principal to exactly these contexts (none: unbind all); its tasks in contexts
    it loses are cancelled. A principal bound to one context spends there by default."""
    doc = _backend(home, database, server, api_key).set_contexts(name, list(context or []))
    bound = ", ".join(doc["contexts"]) or "no context"
    _out(as_json, doc, f"principal [bold]{escape(name)}[/] is bound to {escape(bound)}")


def _set_state(name: str, state: str, backend: _Local | _Remote, as_json: bool) -> None:
    doc = backend.set_state(name, state)
    _out(as_json, doc, f"principal [bold]{escape(name)}[/] is {doc['state']}")


@principal_app.command("disable")
@handle_errors
def principal_disable(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Refuse a principal's keys until it is enabled again; its active tasks are cancelled."""
    _set_state(name, "disabled", _backend(home, database, server, api_key), as_json)


@principal_app.command("enable")
@handle_errors
def principal_enable(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Let a disabled principal's keys work again."""
    _set_state(name, "active", _backend(home, database, server, api_key), as_json)


@principal_app.command("delete")
@handle_errors
def principal_delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a principal for good: keys revoked, stream access and context bindings dropped,
    tasks cancelled. The name stays taken (the ledger's records carry it)."""
    if not yes:
        typer.confirm(f"delete principal {name!r} for good?", abort=True)
    _set_state(name, "deleted", _backend(home, database, server, api_key), as_json)


# --- stream access ------------------------------------------------------------------------------


@principal_app.command("grant")
@handle_errors
def principal_grant(
    name: str,
    stream: str,
    permission: Annotated[str, typer.Option(help="read or own.")] = "read",
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give a principal read (or own) access to a stream."""
    doc = _backend(home, database, server, api_key).grant(name, stream, permission)
    line = f"principal [bold]{escape(name)}[/] may now {permission} stream {escape(stream)}"
    _out(as_json, doc, line)


@principal_app.command("revoke")
@handle_errors
def principal_revoke(
    name: str,
    stream: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a principal's access to a stream; its tasks on the stream are cancelled."""
    doc = _backend(home, database, server, api_key).revoke(name, stream)
    _out(as_json, doc, f"principal [bold]{escape(name)}[/] has no access to {escape(stream)}")


@principal_app.command("acl")
@handle_errors
def principal_acl(
    stream: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List who may read or owns a stream (admins read every stream without an entry)."""
    doc = _backend(home, database, server, api_key).acl(stream)
    if as_json:
        emit_json(doc)
        return
    table = Table("principal", "permission", title=f"access to {escape(stream)}")
    for who, perm in sorted(doc["principals"].items()):
        table.add_row(escape(who), perm)
    console.print(table)


# --- keys ---------------------------------------------------------------------------------------


@key_app.command("create")
@handle_errors
def key_create(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue another API key for a principal (shown once, stored hashed)."""
    doc = _backend(home, database, server, api_key).key_create(name)
    _out(as_json, doc, f"new API key of [bold]{escape(name)}[/] (shown once): {doc['api_key']}")


@key_app.command("list")
@handle_errors
def key_list(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a principal's keys: id, created, expiry, state (never a secret)."""
    docs = _backend(home, database, server, api_key).key_list(name)
    if as_json:
        emit_json(docs)
    else:
        _print_keys(docs)


@key_app.command("revoke")
@handle_errors
def key_revoke(
    name: str,
    key_id: Annotated[str, typer.Argument(help="The key's id: the middle part of bbk_<id>_….")],
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key at once; the principal's active tasks are cancelled."""
    doc = _backend(home, database, server, api_key).key_revoke(name, key_id)
    _out(as_json, doc, f"key {escape(key_id)} of [bold]{escape(name)}[/] revoked")


@key_app.command("rotate")
@handle_errors
def key_rotate(
    name: str,
    key_id: Annotated[str, typer.Argument(help="The id of the key to replace.")],
    grace: Annotated[
        str,
        typer.Option(help="How long the old key keeps working: 0, 30s, 15m, 6h or 1d."),
    ] = "0",
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue a new key (shown once) and retire the old one after a grace period; the
    principal's tasks go on."""
    from blockbudget.cli.common import parse_window

    seconds = 0.0 if grace.strip() == "0" else parse_window(grace).total_seconds()
    doc = _backend(home, database, server, api_key).key_rotate(name, key_id, seconds)
    ends = _when(doc["replaced"]["expires"]) or "now"
    line = (
        f"new API key of [bold]{escape(name)}[/] (shown once): {doc['api_key']}; "
        f"key {escape(key_id)} is refused from {ends}"
    )
    _out(as_json, doc, line)
