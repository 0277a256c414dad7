"""The values of a platform stream release (re-exported by
:mod:`blockbudget.streaming.platform_release`): where a slot's PDF comes from, a slot and its
public answer, a release's fingerprint, and the cost of a ρ-zCDP window by cost kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from blockbudget.budget import Cost, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.histogram import HistogramConfig, HistogramRelease


def _rdp_of_zcdp(rho: float) -> Cost:
    return RdpCurve.from_function(lambda alpha: alpha * rho)  # ρ-zCDP ⇒ (α, αρ)-RDP


#: The cost of a ρ-zCDP window release, by the cost kind of the stream's rule. A ρ-zCDP
#: guarantee is exactly the RDP curve α·ρ (Bun & Steinke 2016, Def. 1.1); the (ε, δ) kinds and
#: μ-GDP have no exact image of it (zCDP implies no μ-GDP, and the discrete Gaussian's privacy
#: profile is not exactly the continuous one's), so a Gaussian release on their streams is
#: refused. A new kind that has one adds it here.
ZCDP_COSTS: dict[type[Cost], Callable[[float], Cost]] = {RdpCurve: _rdp_of_zcdp}


@dataclass(frozen=True, kw_only=True)
class SlotSource:
    """How a slot's rows become a compressed PDF (all of it public, declared up front).

    Attributes:
        item_column: the categorical column released.
        user_column: the column identifying the protected user.
        domain: the declared categories (index = bin); the data never adds one.
        min_users: the public floor n_min of users per slot (Δ₁ = 2/n_min).
    """

    item_column: str
    user_column: str
    domain: tuple[str, ...]
    min_users: int

    def __post_init__(self) -> None:
        if not self.domain or len(set(self.domain)) != len(self.domain):
            raise InvalidRequestError("the domain must list at least one category, each once")
        for name in ("item_column", "user_column"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InvalidRequestError(f"{name} must be a non-empty column name")
        Compression(len(self.domain), self.min_users)  # validates n_min


@dataclass(frozen=True)
class StreamSlot:
    """One slot of a platform stream: its index, window start (ISO text) and blocks."""

    t: int
    key: str
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class ReleasedSlot:
    """One slot's public answer with where it came from."""

    slot: StreamSlot
    release: HistogramRelease = field(repr=False)


def _fingerprint(stream: str, source: SlotSource, config: HistogramConfig) -> dict[str, Any]:
    return {
        "stream": stream,
        "source": asdict(source),
        "epsilon": repr(config.epsilon),
        "delta": repr(config.delta),
        "mode": config.mode.value,
        "noise": config.noise.value,
        "window": config.window,
        "warmup": config.warmup,
        "series": type(config.series).__name__ + repr(config.series),
        "horizon": config.horizon.value,
        "expected_slots": config.expected_slots,
        "combine": config.combine.value,
        "smoothing": repr(config.smoothing),
    }
