"""``blockbudget afford``: the largest ε a block selection can still afford in a context.

Exact from the stream's filter (:mod:`blockbudget.accounting.afford`): a request of exactly
the printed ε (at the given δ) fits on every selected block now, and one 1e-18 larger does not.
On an RDP stream ``--gaussian`` asks instead for the smallest Gaussian noise multiplier σ/Δ.
Locally or, with ``--server``, through ``/v1/streams/{stream}/afford``. Nothing is reserved.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from blockbudget.cli.common import (
    DEFAULT_HOME,
    ContextOpt,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    app,
    console,
    emit_json,
    handle_errors,
    local_context,
    open_platform,
    print_blocks_used,
    remote,
)
from blockbudget.errors import InvalidRequestError


@app.command("afford")
@handle_errors
def afford(
    stream: Annotated[str, typer.Argument(help="The stream whose blocks are asked about.")],
    context: ContextOpt = None,
    block: Annotated[
        list[str] | None, typer.Option("--block", help="A block id or key (repeatable).")
    ] = None,
    last: Annotated[
        int | None, typer.Option(help="The newest N live blocks (affordable or not).")
    ] = None,
    delta: Annotated[
        str, typer.Option(help="δ of the (ε, δ) budget sized (0 on RDP streams).")
    ] = "0",
    gaussian: Annotated[
        bool,
        typer.Option(
            "--gaussian", help="RDP streams: the smallest Gaussian noise multiplier σ/Δ instead."
        ),
    ] = False,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """The largest ε (at --delta) one can still request over the blocks in the context."""
    if (block is None) == (last is None):
        raise InvalidRequestError("give exactly one of --block (repeatable) and --last N")
    kind = "gaussian" if gaussian else "budget"
    client = remote(server, api_key)
    if client is not None:
        body: dict[str, Any] = {"delta": delta, "kind": kind}
        body.update({"blocks": list(block)} if block else {"last": last})
        if context:
            body["context"] = context
        with client:
            out = client.call("POST", f"/v1/streams/{stream}/afford", json=body)
    else:
        from blockbudget.affordance import AffordFor
        from blockbudget.platform import Last

        platform = open_platform(home)
        try:
            ctx = local_context(platform, context)
            selection: list[str] | Last = list(block) if block else Last(last or 0)
            out = platform.afford(
                stream, selection, context=ctx, delta=delta, kind=AffordFor(kind)
            ).to_json()
        finally:
            platform.close()
    if as_json:
        emit_json(out)
        return
    print_affordance(out)


def print_affordance(out: dict[str, Any]) -> None:
    """An afford answer as text."""
    where = f"{len(out['blocks'])} block(s) of {escape(out['stream'])} in context " + escape(
        repr(out["context"])
    )
    if out["kind"] == "gaussian":
        z = out["noise_multiplier"]
        text = (
            "no Gaussian charge fits any more"
            if z is None
            else f"the smallest Gaussian noise multiplier σ/Δ that fits is [bold]{z}[/]"
        )
    elif out["epsilon"] is None:
        text = f"nothing fits at δ={out['delta']}: a block has less δ left (or none at all)"
    else:
        text = (
            f"the largest ε one can still request at δ={out['delta']} is [bold]{out['epsilon']}[/]"
        )
        exact = out.get("epsilon_exact", out["epsilon"])
        if exact != out["epsilon"]:  # a float would round the exact answer above the budget
            text += f" (exactly {exact}, to request as written: --epsilon {exact})"
    console.print(f"{where}: {text}")
    console.print(f"  rule: {escape(out['rule'])}")
    if out["binding"]:
        console.print(f"  limited by: {escape(', '.join(out['binding'][:12]))}")
    print_blocks_used(list(out["blocks"]), label="blocks asked about")
