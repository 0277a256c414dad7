"""Request and response bodies of the administration routes (see
:mod:`blockbudget.service.admin_views` for how they are filled)."""

from pydantic import BaseModel, ConfigDict, Field

from blockbudget.service.auth import MAX_GRACE_SECONDS, Permission, Role
from blockbudget.service.schema_fields import Number


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeyOut(BaseModel):
    """An API key's id and dates; its secret is never shown again after it was issued."""

    key_id: str
    created: str
    expires: str | None = Field(description="ISO 8601 UTC; set on a key rotated with a grace")
    revoked: bool
    active: bool = Field(description="the key authenticates now (its principal's state aside)")


class PrincipalRecordOut(BaseModel):
    """A principal as an admin sees it (no secret)."""

    name: str
    role: Role
    state: str = Field(description="active, disabled or deleted")
    created: str
    contexts: list[str]
    streams: dict[str, Permission]
    keys: list[KeyOut]


class RoleIn(_Strict):
    role: Role


class RotateIn(_Strict):
    grace_seconds: Number = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        # at most 90 days: checked by the key store, whose refusal says so in words
        json_schema_extra={"maximum": MAX_GRACE_SECONDS},
        description="how long the old key keeps working (0: refused at once; at most 90 days)",
    )


class RotatedKeyOut(BaseModel):
    """The new key (shown once) and the old key's record after the rotation."""

    principal: str
    api_key: str
    key_id: str
    replaced: KeyOut


class StreamAclOut(BaseModel):
    stream: str
    principals: dict[str, Permission]


class ContextAdminOut(BaseModel):
    """A context; times as Unix seconds and as ISO 8601 UTC."""

    name: str
    description: str
    created_at: float
    closed_at: float | None = None
    created: str
    closed: str | None = None
