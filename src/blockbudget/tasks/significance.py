"""Live significance providers: p_ij, the worth of block i to task j, on the live platform.

Seed ``000_de3e86489c8646aa.txt`` §IV-B (problem formulation, Eq. (5)) defines the data-query
significance p_ij and names its sources: prior knowledge (recency of time-sensitive data, or a
table), or, "without any prior knowledge", the change in validation performance that training
on the block brings; §VII-A uses the *reduced validation loss* (CelebA, CIFAR-100) and the
*generation time* (HousePrice). §VI-A, Alg. 1 line 6 compares

    p_ij / (ε_j + ε0) + Lap(4Δ/ε0)  >  T(z_i) + Lap(2Δ/ε0)          (Eq. (9) gives T)

once a block is past z0, and Thm. 3 makes that comparison ε0-DP for a compared quantity of
sensitivity Δ (Dwork & Roth 2014, §3.6, AboveThreshold). Δ is therefore a property of *where
p_ij comes from*, and every provider here states it, with how it was obtained:

* ``recency`` (:class:`RecencySignificance`) reads only public block metadata (window start
  times): ``Disclosure.PUBLIC``, Δ = 0. Nothing in the comparison depends on the block's rows,
  so Alg. 1's Laplace terms have scale 4Δ/ε0 = 0 and ε0 buys nothing: the comparison may be made
  exactly and need not be charged (Thm. 3 holds for every ε0 > 0 when Δ = 0).
* ``user`` (:class:`UserSignificance`): a table a principal supplies — public to the platform,
  Δ = 0, as above; or, when its author computed it from the private rows, the author states Δ
  (``sensitivity``) and the provider reports ``assumed=True``: ``Disclosure.PRIVATE``, and the
  scheduler must compare through AboveThreshold with that Δ.
* ``loss-reduction`` (:class:`~blockbudget.tasks.significance_loss.LossReduction`): §VII-A's
  reduced validation loss, as a *paid DP measurement*. For each block it scores, it opens a
  grant of ε_s on that block alone (``Platform.request``: one reservation, made before any row
  is read), charges ε_s to the ledger durably before any noise is drawn, and computes a DP mean
  of a clipped target column (OpenDP Laplace through :func:`blockbudget.mechanisms.dp_mean`).
  The model is the constant predictor: before, the public prior m0; after training on block i,
  its DP mean μ̃_i; on public validation targets v_1..v_n (§IV-A: "the validation data is given
  in advance") the squared-loss reduction is

      r_i = MSE(m0) − MSE(μ̃_i) = (v̄ − m0)² − (v̄ − μ̃_i)²,   p_ij = min(max(r_i, 0), c),

  with c = min(clip, (v̄ − m0)² − d(v̄, [lower, upper])²), the largest reduction any prediction
  in [lower, upper] can reach. So p_ij ∈ [0, c] and Δ = c: *derived* from the clip and the
  public data (one record can move the exact quantity across its whole range, since a block may
  hold a single record). But the value handed to the scheduler is a DP output
  (``Disclosure.DP_RELEASE``): comparing it with T(z_i) is post-processing (Dwork & Roth 2014,
  Prop. 2.1) and costs no further privacy. For the scheduler's AboveThreshold this means the
  noise Lap(4Δ/ε0) and the run's ε0 are *not needed*: :attr:`comparison_sensitivity` is 0 and
  an exact comparison is private. A scheduler that noises anyway (e.g. one ε0 for all
  providers) is safe with Δ = c — the stated Δ would make it ε0-DP even for the exact r_i — and
  only pays ε0 and loses accuracy for nothing. In Alg. 1's ratio the sensitivity of
  p_ij/(ε_j + ε0) is Δ/(ε_j + ε0) (:meth:`SignificanceProvider.ratio_sensitivity`).

Each provider has a JSON form ``{"provider": name, ...params}`` (:func:`provider_from_json`,
``to_json``), validated strictly: a bad spec is refused before anything is read or charged.
A plain table ``{block: p}`` is read as the ``user`` provider (:func:`significance_from_json`).

Example:
    >>> p = provider_from_json({"provider": "recency", "half_life_seconds": 86400})
    >>> p.name, p.sensitivity, p.assumed, p.cost_per_block
    ('recency', 0.0, False, None)
    >>> provider_from_json(p.to_json()) == p
    True
"""

from __future__ import annotations

import importlib
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.budget import Cost
from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.scheduling.significance import recency_significance
from blockbudget.tasks.provider_params import NOISE_CONTROLS as NOISE_CONTROLS
from blockbudget.tasks.provider_params import check_blocks as check_blocks
from blockbudget.tasks.provider_params import distinct_blocks as distinct_blocks
from blockbudget.tasks.provider_params import number as number
from blockbudget.tasks.provider_params import params_of as params_of
from blockbudget.tasks.provider_params import refuse_noise_controls as refuse_noise_controls

if TYPE_CHECKING:
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform

__all__ = [
    "NOISE_CONTROLS",
    "Disclosure",
    "RecencySignificance",
    "Scores",
    "SignificanceProvider",
    "UserSignificance",
    "provider_from_json",
    "provider_names",
    "refuse_noise_controls",
    "register_provider",
    "significance_from_json",
]


class Disclosure(Enum):
    """What a provider's values reveal about the blocks' rows."""

    PUBLIC = "public"  # read public data only: Δ = 0, comparisons are free
    DP_RELEASE = "dp-release"  # DP outputs already paid for: comparing is post-processing
    PRIVATE = "private"  # read private rows without noise: compare via AboveThreshold with Δ


@dataclass(frozen=True)
class Scores:
    """One scoring: the values and what it cost.

    Attributes:
        values: block id → p_ij, for the blocks scored.
        unscored: blocks left out (a paid provider skips blocks whose budget cannot pay the
            measurement, or retired ones); a scheduler reads a missing block as p = 0.
        charged: (block, cost) for every paid measurement, in order.
        reservations: the ledger reservations opened (one per paid block, closed after).
        secure_noise: False when a seeded (non-secure) noise source drew the noise.
    """

    values: Mapping[str, float]
    unscored: tuple[str, ...] = ()
    charged: tuple[tuple[str, Cost], ...] = ()
    reservations: tuple[str, ...] = ()
    secure_noise: bool = True


class SignificanceProvider(ABC):
    """A source of p_ij (seed 000 §IV-B) with its comparison sensitivity and its price.

    Attributes:
        name: the registry name (the ``provider`` of the JSON form).
    """

    name: ClassVar[str]

    @property
    @abstractmethod
    def sensitivity(self) -> float:
        """Δ of p_ij over one block's data (a bound on its range for derived values)."""

    @property
    @abstractmethod
    def assumed(self) -> bool:
        """True when Δ is an assumption the caller stated rather than derived here."""

    @property
    @abstractmethod
    def disclosure(self) -> Disclosure:
        """What the values reveal (see :class:`Disclosure`)."""

    @property
    def cost_per_block(self) -> Cost | None:
        """What one scoring charges each block it scores (None: nothing)."""
        return None

    @property
    def comparison_sensitivity(self) -> float:
        """The Δ a scheduler's AboveThreshold must use: 0 for public values and DP outputs
        (comparing them is free), :attr:`sensitivity` for private values."""
        return self.sensitivity if self.disclosure is Disclosure.PRIVATE else 0.0

    def ratio_sensitivity(self, *, demand_epsilon: float, comparison_epsilon: float) -> float:
        """Δ of Alg. 1's compared ratio p_ij/(ε_j + ε0) (seed 000 §VI-A, Alg. 1 line 6)."""
        total = demand_epsilon + comparison_epsilon
        if not (math.isfinite(total) and total > 0):
            raise InvalidRequestError(f"ε_j + ε0 must be finite and > 0, got {total!r}")
        return self.comparison_sensitivity / total

    @abstractmethod
    def score(
        self,
        platform: Platform,
        stream: str,
        block_ids: Sequence[str],
        *,
        context: str,
        task: str,
        holder: str = "",
        noise: NoiseSource | None = None,
    ) -> Scores:
        """Score ``block_ids`` of ``stream`` for task ``task``, charging ``context`` if paid.

        Raises:
            InvalidRequestError / UnknownBlockError / UnknownContextError: bad input; nothing
                is read or charged.
        """

    def values(
        self,
        platform: Platform,
        stream: str,
        block_ids: Sequence[str],
        *,
        context: str,
        task: str,
        holder: str = "",
        noise: NoiseSource | None = None,
    ) -> dict[str, float]:
        """block id → p_ij (see :meth:`score`, which also says what was charged)."""
        scores = self.score(
            platform, stream, block_ids, context=context, task=task, holder=holder, noise=noise
        )
        return dict(scores.values)

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The JSON form ``{"provider": name, ...params}``."""

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> SignificanceProvider:
        """Build from the JSON form's parameters (without ``provider``), strictly checked."""


# --- registry and JSON -------------------------------------------------------------------------

_REGISTRY: dict[str, type[SignificanceProvider]] = {}
#: Modules whose providers register themselves on import (loaded on first registry use, so
#: that this module never imports them at import time).
_BUILTIN_MODULES = ("blockbudget.tasks.significance_loss",)


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def register_provider(cls: type[SignificanceProvider]) -> type[SignificanceProvider]:
    """Add a provider class to the registry under ``cls.name`` (a class decorator).

    Raises:
        InvalidRequestError: the name is taken by another class.
    """
    other = _REGISTRY.get(cls.name)
    if other is not None and other is not cls:
        raise InvalidRequestError(f"significance provider {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def provider_names() -> tuple[str, ...]:
    """The registered provider names, sorted.

    Example:
        >>> provider_names()
        ('loss-reduction', 'recency', 'user')
    """
    _load_builtins()
    return tuple(sorted(_REGISTRY))


def provider_from_json(spec: Mapping[str, Any]) -> SignificanceProvider:
    """A provider from its JSON form ``{"provider": name, ...params}``.

    Raises:
        InvalidRequestError: not an object, an unknown provider, a missing or unknown
            parameter, or a parameter of the wrong type or out of range.

    Example:
        >>> provider_from_json({"provider": "user", "values": {"s/b1": 2.0}}).to_json()
        {'provider': 'user', 'values': {'s/b1': 2.0}, 'default': 0.0}
    """
    if not isinstance(spec, Mapping):
        raise InvalidRequestError(
            f"a significance provider spec is a JSON object, got {type(spec).__name__}"
        )
    _load_builtins()
    name = spec.get("provider")
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise InvalidRequestError(
            f"unknown significance provider {name!r}; known: {list(provider_names())}"
        )
    return cls.from_params({k: v for k, v in spec.items() if k != "provider"})


def significance_from_json(obj: Any) -> SignificanceProvider | None:
    """A task's stored significance: None, a plain table ``{block: p}`` (the ``user``
    provider), or a provider spec (an object with ``provider``).

    Raises:
        InvalidRequestError: anything else, or a bad table or spec.

    Example:
        >>> significance_from_json({"s/b1": 1.5}).name
        'user'
    """
    if obj is None:
        return None
    if isinstance(obj, Mapping) and "provider" in obj:
        return provider_from_json(obj)
    if isinstance(obj, Mapping):
        return UserSignificance.from_params({"values": obj})
    raise InvalidRequestError(
        f"significance is null, a table {{block: p}} or a provider spec, got {type(obj).__name__}"
    )


# --- recency -----------------------------------------------------------------------------------


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@register_provider
@dataclass(frozen=True)
class RecencySignificance(SignificanceProvider):
    """p_ij = scale · 2^(−|t_i − target| / half_life), t_i the start of block i's window.

    Seed 000 §VII-A (HousePrice): "the closer the generation time to the prediction task, the
    more important the datablock". Reads only the blocks' public window times: Δ = 0.

    Args:
        half_life_seconds: how far from the target a block's worth halves (> 0).
        target: the prediction time (UTC; naive means UTC); None means the time of scoring.
        scale: p of a block at the target (> 0).
        clock: the time source when ``target`` is None (not part of the JSON form).

    Example:
        >>> RecencySignificance(half_life_seconds=3600).to_json()
        {'provider': 'recency', 'half_life_seconds': 3600.0, 'scale': 1.0}
    """

    name: ClassVar[str] = "recency"
    half_life_seconds: float
    target: datetime | None = None
    scale: float = 1.0
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def __post_init__(self) -> None:
        hl = number(self.half_life_seconds, what="half_life_seconds", positive=True)
        object.__setattr__(self, "half_life_seconds", hl)
        object.__setattr__(self, "scale", number(self.scale, what="scale", positive=True))
        if self.target is not None:
            if not isinstance(self.target, datetime):
                raise InvalidRequestError(f"target must be a datetime, got {self.target!r}")
            object.__setattr__(self, "target", _utc(self.target))

    @property
    def sensitivity(self) -> float:
        """Δ = 0: public window times only."""
        return 0.0

    @property
    def assumed(self) -> bool:
        """False: Δ = 0 is derived (public data), not assumed."""
        return False

    @property
    def disclosure(self) -> Disclosure:
        return Disclosure.PUBLIC

    def score(
        self,
        platform: Platform,
        stream: str,
        block_ids: Sequence[str],
        *,
        context: str,
        task: str,
        holder: str = "",
        noise: NoiseSource | None = None,
    ) -> Scores:
        from blockbudget.store import Unit, catalog

        ids = distinct_blocks(block_ids)
        if platform.stream(stream).blocking.unit is not Unit.TIME:
            raise InvalidRequestError(
                f"recency significance needs a stream blocked by time; {stream!r} is not"
            )
        with platform.store.engine.connect() as conn:
            metas = catalog.select_blocks_by_id(conn, ids)
        bad = [b for b in ids if b not in metas or metas[b].stream != stream]
        if bad:
            raise UnknownBlockError(f"stream {stream!r} has no block(s) {bad[:5]}")
        times: dict[str, float] = {}
        for b in ids:
            start = metas[b].window_start
            assert start is not None  # a TIME block always has its window
            times[b] = _utc(start).timestamp()
        target = self.target.timestamp() if self.target is not None else float(self.clock())
        values = recency_significance(
            times, target_time=target, half_life=self.half_life_seconds, scale=self.scale
        )
        return Scores(values=values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.name, "half_life_seconds": self.half_life_seconds}
        if self.target is not None:
            out["target"] = self.target.isoformat()
        out["scale"] = self.scale
        return out

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RecencySignificance:
        params_of(
            params, required=["half_life_seconds"], optional=["target", "scale"], name=cls.name
        )
        target = params.get("target")
        when: datetime | None = None
        if target is not None:
            if not isinstance(target, str):
                raise InvalidRequestError(f"target must be an ISO 8601 time, got {target!r}")
            try:
                when = datetime.fromisoformat(target)
            except ValueError:
                raise InvalidRequestError(
                    f"target must be an ISO 8601 time, got {target!r}"
                ) from None
        return cls(
            half_life_seconds=params["half_life_seconds"],
            target=when,
            scale=params.get("scale", 1.0),
        )


# --- user --------------------------------------------------------------------------------------


@register_provider
@dataclass(frozen=True)
class UserSignificance(SignificanceProvider):
    """p_ij from a table a principal supplies (seed 000 §IV-B, "prior knowledge").

    Entries name blocks by id (``stream/key`` or ``stream/key#2``) or by key (a key covers its
    window's first block and its late ones); blocks the table omits get ``default``. Public to
    the platform: Δ = 0 — unless the table's author derived it from the private rows and says
    so with ``sensitivity``, which the provider then reports as an assumption.

    Args:
        table: (name, p) pairs, p finite and ≥ 0.
        default: p of blocks the table omits.
        stated_sensitivity: Δ the author states for a table computed from private rows.

    Example:
        >>> u = UserSignificance.of({"s/b1": 2.0}, sensitivity=0.5)
        >>> u.sensitivity, u.assumed, u.disclosure.value
        (0.5, True, 'private')
    """

    name: ClassVar[str] = "user"
    table: tuple[tuple[str, float], ...]
    default: float = 0.0
    stated_sensitivity: float | None = None

    def __post_init__(self) -> None:
        entries = []
        for key, p in self.table:
            if not isinstance(key, str) or not key:
                raise InvalidRequestError(f"significance table keys are block names, got {key!r}")
            entries.append((key, number(p, what=f"significance of {key!r}", minimum=0.0)))
        if len({k for k, _ in entries}) != len(entries):
            raise InvalidRequestError("the significance table names a block twice")
        object.__setattr__(self, "table", tuple(sorted(entries)))
        default = number(self.default, what="default significance", minimum=0.0)
        object.__setattr__(self, "default", default)
        if self.stated_sensitivity is not None:
            stated = number(self.stated_sensitivity, what="sensitivity", positive=True)
            object.__setattr__(self, "stated_sensitivity", stated)

    @classmethod
    def of(
        cls, table: Mapping[str, float], *, default: float = 0.0, sensitivity: float | None = None
    ) -> UserSignificance:
        """From a mapping name → p."""
        return cls(tuple(table.items()), default=default, stated_sensitivity=sensitivity)

    @property
    def sensitivity(self) -> float:
        """0 for a public table; the author's stated Δ otherwise."""
        return 0.0 if self.stated_sensitivity is None else self.stated_sensitivity

    @property
    def assumed(self) -> bool:
        return self.stated_sensitivity is not None

    @property
    def disclosure(self) -> Disclosure:
        return Disclosure.PUBLIC if self.stated_sensitivity is None else Disclosure.PRIVATE

    def lookup(self, stream: str, block_id: str) -> float:
        """p of one block: its id's entry, else its key's, else ``default``."""
        table = dict(self.table)
        if block_id in table:
            return table[block_id]
        prefix = f"{stream}/"
        if block_id.startswith(prefix):
            key = block_id[len(prefix) :]
            if key in table:
                return table[key]
            base, sep, seq = key.rpartition("#")
            if sep and seq.isdigit() and base in table:
                return table[base]
        return self.default

    def score(
        self,
        platform: Platform,
        stream: str,
        block_ids: Sequence[str],
        *,
        context: str,
        task: str,
        holder: str = "",
        noise: NoiseSource | None = None,
    ) -> Scores:
        ids = distinct_blocks(block_ids)
        return Scores(values={b: self.lookup(stream, b) for b in ids})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "provider": self.name,
            "values": dict(self.table),
            "default": self.default,
        }
        if self.stated_sensitivity is not None:
            out["sensitivity"] = self.stated_sensitivity
        return out

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> UserSignificance:
        params_of(params, required=["values"], optional=["default", "sensitivity"], name=cls.name)
        table = params["values"]
        if not isinstance(table, Mapping):
            raise InvalidRequestError(f"values must be an object {{block: p}}, got {table!r}")
        return cls.of(
            table, default=params.get("default", 0.0), sensitivity=params.get("sensitivity")
        )
