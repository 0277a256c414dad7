"""A user stream's DP maximum id over HTTP (Sage §4.4; :mod:`blockbudget.userids`).

* ``POST /v1/streams/{stream}/max-id`` (admins and the stream's owners, in a context they may
  spend in) releases a new DP maximum id: a Laplace(1/ε) count of the distinct ids at or above
  the floor, charged to the blocks it reads in the given context before any noise is drawn;
  from then on only blocks at or below its ``safe_max`` can be selected. A user stream is gated
  from its creation: until its first release no block of it can be selected (by anyone) and
  analysts see none, so its owner runs this once after the first ingest and then periodically.
* ``GET /v1/streams/{stream}/max-id`` (any reader of the stream) returns the latest release:
  it is public by construction (a DP release), so reading it again costs nothing.

Failures while reading rows go out as a stable code only (:mod:`blockbudget.service.failures`).
"""

from typing import Annotated

import anyio.to_thread
from fastapi import Depends, FastAPI
from pydantic import BaseModel, Field

from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_context, require_stream
from blockbudget.service.auth import Principal
from blockbudget.service.failures import LEDGER_REFUSALS, concealing
from blockbudget.service.params import CONTEXT_PATTERN, StreamPath
from blockbudget.service.schema_fields import MIN_BUDGET, Number
from blockbudget.userids import MaxIdRelease, latest_release, release_max_id

__all__ = ["MaxIdIn", "MaxIdOut", "register_max_id_routes"]


class MaxIdIn(BaseModel):
    """A maximum-id release's parameters."""

    context: str = Field(min_length=1, max_length=64, pattern=CONTEXT_PATTERN)
    epsilon: Number = Field(ge=MIN_BUDGET, le=1e15)
    beta: Number = Field(default=0.05, gt=0, lt=0.5)


class MaxIdOut(BaseModel):
    """A released maximum id (every field is public)."""

    stream: str
    released_max: float
    safe_max: int
    floor: int
    epsilon: str
    beta: float
    secure_noise: bool


def max_id_out(r: MaxIdRelease) -> MaxIdOut:
    """The public form of a release."""
    return MaxIdOut(
        stream=r.stream,
        released_max=r.released_max,
        safe_max=r.safe_max,
        floor=r.floor,
        epsilon=str(r.epsilon),
        beta=r.beta,
        secure_noise=r.secure_noise,
    )


def register_max_id_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add the maximum-id routes (module docstring) to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def run(me: Principal, stream: str, body: MaxIdIn) -> MaxIdOut:
        require_stream(me, stream, own=True)  # admins and the stream's owners
        require_context(me, body.context)
        with concealing("max_id", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
            release = release_max_id(
                platform,
                stream,
                context=body.context,
                epsilon=body.epsilon,
                beta=body.beta,
                holder=me.name,
            )
        return max_id_out(release)

    @app.post("/v1/streams/{stream}/max-id", tags=["streams"])
    async def post_max_id(me: Auth, stream: StreamPath, body: MaxIdIn) -> MaxIdOut:
        return await anyio.to_thread.run_sync(run, me, stream, body)

    @app.get("/v1/streams/{stream}/max-id", tags=["streams"])
    def get_max_id(me: Auth, stream: StreamPath) -> MaxIdOut:
        require_stream(me, stream)
        release = latest_release(platform, stream)
        if release is None:
            raise InvalidRequestError(f"stream {stream!r} has no maximum-id release")
        return max_id_out(release)
