"""Live stream releases over HTTP: run a windowed or per-slot histogram release of a time-blocked
stream, read its latest public answer, and ask which mode a configuration supports.

* ``POST /v1/streams/{stream}/releases/{name}`` runs every complete window not yet released
  (:class:`~blockbudget.streaming.PlatformStreamRelease`): each slot is read through its own grant
  on exactly its blocks, in the caller's context, and charged the window's budget.
* ``GET /v1/streams/{stream}/releases/{name}`` returns the saved public state.
* ``POST /v1/releases/recommend`` forecasts every mode from public parameters
  (:func:`~blockbudget.streaming.recommend.recommend`); it reads nothing and needs only a key.

Same rules as every route (:mod:`blockbudget.service.access`): the caller must read the stream
and be bound to the context; a release is the caller's own (its saved state is kept under a
SHA-256 digest of the principal's name, so two principals never read or continue each other's
release); a refused request reserves and charges nothing; failures while reading rows go out
as a stable code only (:mod:`blockbudget.service.failures`). Slots are named by their window
start (time streams have no opaque block names to hide).
"""

import hashlib
import math
import re
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import Depends, FastAPI
from pydantic import AfterValidator, BaseModel, Field

from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_stream, resolve_context
from blockbudget.service.auth import Principal
from blockbudget.service.failures import LEDGER_REFUSALS, concealing
from blockbudget.service.params import RELEASE_PATTERN, ReleasePath, StreamPath
from blockbudget.service.schema_fields import (
    MIN_BUDGET,
    NOT_TINY,
    ContextName,
    Count,
    Flag,
    Number,
    not_tiny,
)
from blockbudget.streaming.platform_release import PlatformStreamRelease, open_release

__all__ = ["ReleaseIn", "ReleaseOut", "register_stream_release_routes"]

_NAME = re.compile(RELEASE_PATTERN)


class ReleaseIn(BaseModel):
    """A stream release's parameters (all public; see :class:`~blockbudget.streaming.SlotSource`
    and :class:`~blockbudget.streaming.HistogramConfig`)."""

    context: str | None = ContextName
    item_column: str = Field(min_length=1)
    user_column: str = Field(min_length=1)
    domain: list[str] = Field(min_length=1, max_length=100_000)
    min_users: Count = Field(ge=1, le=10**12)
    epsilon: Number = Field(ge=MIN_BUDGET, le=1e15)
    delta: Annotated[Number, AfterValidator(not_tiny)] = Field(
        default=0.0, ge=0, lt=1, json_schema_extra=NOT_TINY
    )
    mode: Literal["windowed", "per-slot"] = "windowed"
    noise: Literal["laplace", "gaussian"] = "laplace"
    window: Count = Field(default=30, ge=1, le=100_000)
    warmup: Flag = True
    horizon: Literal["accumulative", "instantaneous"] = "accumulative"
    expected_slots: Count | None = Field(default=365, ge=2, le=10_000_000)
    max_windows: Count | None = Field(default=None, ge=1)


class SlotOut(BaseModel):
    """One slot answered by a run."""

    t: int
    key: str
    window: int
    released: bool
    refused: bool
    cost: float
    unit: str
    blocks: list[str]
    read: list[str] = []  # the blocks read and charged (none when no block could pay)
    secure_noise: bool


class ReleaseOut(BaseModel):
    """A release's public state after a run (or as saved)."""

    stream: str
    name: str
    slots_done: int
    spent: str
    unit: str
    answer: dict[str, float]
    slots: list[SlotOut]


class RecommendIn(BaseModel):
    """Public stream parameters for :func:`~blockbudget.streaming.recommend.recommend`."""

    domain_size: Count = Field(ge=1, le=10_000_000)
    min_users: Count = Field(ge=1, le=10**12)
    epsilon: Number = Field(ge=MIN_BUDGET, le=1e15)
    horizon: Count | None = Field(default=None, ge=2, le=1_000_000)
    window: Count = Field(default=30, ge=1, le=100_000)
    delta: Annotated[Number, AfterValidator(not_tiny)] = Field(
        default=0.0, ge=0, lt=1, json_schema_extra=NOT_TINY
    )
    answer: Literal["accumulative", "instantaneous"] = "accumulative"
    warmup: Flag = True


def principal_part(principal: str) -> str:
    """The principal's part of a saved release's name: a SHA-256 digest of the name, so that
    two principals never share a release (fixed length, so ``<digest>--<name>`` is injective)."""
    return hashlib.sha256(principal.encode()).hexdigest()


def build_release(
    platform: Platform, stream: str, name: str, body: ReleaseIn, *, context: str, holder: str
) -> PlatformStreamRelease:
    """The release a request body asks for (secure noise; ``name`` already scoped)."""
    options = body.model_dump(exclude={"context", "max_windows"})
    return open_release(platform, stream, name=name, context=context, holder=holder, **options)


def release_out(
    release: PlatformStreamRelease, name: str, slots: list[dict[str, Any]]
) -> ReleaseOut:
    """The public form of a release and the slots a run answered."""
    return ReleaseOut(
        stream=release.stream,
        name=name,
        slots_done=release.slots_done,
        spent=release.spent,
        unit=release.config.unit,
        answer=release.answer,
        slots=[SlotOut(**s) for s in slots],
    )


def register_stream_release_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add the stream-release routes (module docstring) to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def scoped(me: Principal, name: str) -> str:
        if not _NAME.match(name):
            raise InvalidRequestError(
                f"a release name has 1-64 letters, digits, '-' or '_', got {name!r}"
            )
        return f"{principal_part(me.name)}--{name}"

    def run(me: Principal, stream: str, name: str, body: ReleaseIn) -> ReleaseOut:
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        release = build_release(
            platform, stream, scoped(me, name), body, context=context, holder=me.name
        )
        with concealing("stream_release", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
            done = release.run(max_windows=body.max_windows)
        slots = release.log[-len(done) :] if done else []
        return release_out(release, name, slots)

    @app.post("/v1/streams/{stream}/releases/{name}", tags=["streams"])
    async def run_release(
        me: Auth, stream: StreamPath, name: ReleasePath, body: ReleaseIn
    ) -> ReleaseOut:
        return await anyio.to_thread.run_sync(run, me, stream, name, body)

    @app.get("/v1/streams/{stream}/releases/{name}", tags=["streams"])
    def get_release(me: Auth, stream: StreamPath, name: ReleasePath) -> dict[str, Any]:
        """The saved public state of the caller's release (its latest answer and slot log)."""
        import json
        from pathlib import Path

        require_stream(me, stream)
        path = Path(platform.home) / "releases" / stream / f"{scoped(me, name)}.json"
        if not path.exists():
            raise InvalidRequestError(f"no release {name!r} of stream {stream!r} for this key")
        data = json.loads(path.read_text())
        domain = data["fingerprint"]["source"]["domain"]
        answer = dict(zip(domain, data["answer"], strict=True))
        return {"stream": stream, "name": name, "answer": answer, "log": data["log"]}

    @app.post("/v1/releases/recommend", tags=["streams"])
    def recommend_release(me: Auth, body: RecommendIn) -> dict[str, Any]:
        from dataclasses import asdict

        from blockbudget.streaming.config import Horizon
        from blockbudget.streaming.recommend import recommend

        r = recommend(**body.model_dump(exclude={"answer"}), answer=Horizon(body.answer))
        return {
            "best": r.best,
            "horizon": r.horizon,
            "warnings": list(r.warnings),
            "forecasts": [
                {
                    k: None if isinstance(v, float) and not math.isfinite(v) else v
                    for k, v in asdict(f).items()
                }
                for f in r.forecasts
            ],
        }
