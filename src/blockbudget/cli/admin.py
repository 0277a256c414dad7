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

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from blockbudget.cli.admin_backends import AdminBackend, backend, parse_role
from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    YesOpt,
    confirm_irreversible,
    console,
    emit_json,
    handle_errors,
    principal_app,
)

key_app = typer.Typer(help="API keys: create, list, revoke, rotate.", no_args_is_help=True)
principal_app.add_typer(key_app, name="key")

DatabaseOpt = Annotated[
    str | None,
    typer.Option(envvar="BLOCKBUDGET_DATABASE", help="SQLAlchemy URL of the ledger database."),
]
ContextsOpt = Annotated[
    list[str] | None, typer.Option("--context", help="Context(s) the principal may spend in.")
]


def _when(text: str | None) -> str:
    """An ISO 8601 UTC time as a table shows it, to the minute like every other CLI time
    (``2026-11-24 03:12 UTC``; the JSON form keeps the full time)."""
    return "" if text is None else f"{text[:16].replace('T', ' ')} UTC"


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
    parse_role(role)  # refused here, the same locally and with --server
    doc = backend(home, database, server, api_key).add(name, role, list(context or []))
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
    docs = backend(home, database, server, api_key).principals()
    if as_json:
        emit_json({"principals": docs})  # an object, like every other list command's
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
    doc = backend(home, database, server, api_key).record(name)
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
    parse_role(role)
    doc = backend(home, database, server, api_key).set_role(name, role)
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
    doc = backend(home, database, server, api_key).set_contexts(name, list(context or []))
    bound = ", ".join(doc["contexts"]) or "no context"
    _out(as_json, doc, f"principal [bold]{escape(name)}[/] is bound to {escape(bound)}")


def _set_state(name: str, state: str, admin: AdminBackend, as_json: bool) -> None:
    doc = admin.set_state(name, state)
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
    _set_state(name, "disabled", backend(home, database, server, api_key), as_json)


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
    _set_state(name, "active", backend(home, database, server, api_key), as_json)


@principal_app.command("delete")
@handle_errors
def principal_delete(
    name: str,
    yes: YesOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a principal for good: keys revoked, stream access and context bindings dropped,
    tasks cancelled. The name stays taken (the ledger's records carry it)."""
    confirm_irreversible(f"delete principal {name!r} for good?", yes=yes, as_json=as_json)
    _set_state(name, "deleted", backend(home, database, server, api_key), as_json)


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
    doc = backend(home, database, server, api_key).grant(name, stream, permission)
    line = f"principal [bold]{escape(name)}[/] may now {permission} stream {escape(stream)}"
    _out(as_json, _access(doc, name, stream), line)


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
    doc = backend(home, database, server, api_key).revoke(name, stream)
    line = f"principal [bold]{escape(name)}[/] has no access to {escape(stream)}"
    _out(as_json, _access(doc, name, stream), line)


def _access(doc: dict[str, Any], name: str, stream: str) -> dict[str, Any]:
    """One JSON shape for ``grant``/``revoke`` whoever runs them: ``{"principal", "stream",
    "permission"}`` (the right on the stream afterwards; null: none). An admin's answer is the
    principal's whole record, a stream owner's only this right (an owner may not read the
    record); both reduce to it."""
    if "permission" in doc:
        return {"principal": name, "stream": stream, "permission": doc["permission"]}
    return {"principal": name, "stream": stream, "permission": doc["streams"].get(stream)}


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
    doc = backend(home, database, server, api_key).acl(stream)
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
    doc = backend(home, database, server, api_key).key_create(name)
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
    docs = backend(home, database, server, api_key).key_list(name)
    if as_json:
        emit_json({"principal": name, "keys": docs})
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
    """Revoke a key at once; the principal's active tasks are cancelled. The last usable admin
    key is refused (exit 2): issue another admin key first."""
    doc = backend(home, database, server, api_key).key_revoke(name, key_id)
    _out(as_json, doc, f"key {escape(key_id)} of [bold]{escape(name)}[/] revoked")


@key_app.command("rotate")
@handle_errors
def key_rotate(
    name: str,
    key_id: Annotated[str, typer.Argument(help="The id of the key to replace.")],
    grace: Annotated[
        str,
        typer.Option(
            help="How long the old key keeps working: 0, 30s, 15m, 6h or 1d (at most 90d)."
        ),
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
    from blockbudget.errors import InvalidRequestError
    from blockbudget.service.auth import MAX_GRACE_SECONDS

    seconds = 0.0 if grace.strip() == "0" else parse_window(grace, name="--grace").total_seconds()
    if seconds > MAX_GRACE_SECONDS:
        raise InvalidRequestError(f"--grace must be at most 90 days (90d), got {grace!r}")
    doc = backend(home, database, server, api_key).key_rotate(name, key_id, seconds)
    ends = _when(doc["replaced"]["expires"]) or "now"
    line = (
        f"new API key of [bold]{escape(name)}[/] (shown once): {doc['api_key']}; "
        f"key {escape(key_id)} is refused from {ends}"
    )
    _out(as_json, doc, line)
