"""What pricing and running a query return: frozen values with public metadata only.

A :class:`QueryResult` holds the noisy answer (per declared group), the blocks read, the cost
charged per block, every part's noise scale and sensitivity, confidence intervals, and whether
the noise was secure. It never holds a row or an exact count — not even how many rows the blocks
hold or how many passed the filters: those are data, and the ε drawn does not cover them.
A :class:`DryRun` is a query's price on a selection, computed without reserving, sealing or
charging anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blockbudget.budget import Cost
from blockbudget.engine.plan import Scalar
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind, Selection
from blockbudget.mechanisms.results import Perturbation
from blockbudget.query.jsonform import literal_to_json, to_dict
from blockbudget.query.parts import half_width
from blockbudget.query.spec import Query

#: The confidence of the intervals a result reports.
CONFIDENCE = 0.95

#: One group's answer: a number (count, sum, mean, variance) or a mapping (histogram:
#: category → count; quantiles: probability → value).
Value = float | Mapping[Any, float]


@dataclass(frozen=True)
class GroupAnswer:
    """The answer for one declared group (the only one without group-by).

    Attributes:
        key: the group's key values, one per group-by key (empty without group-by).
        value: the noisy answer.
        interval: a :data:`CONFIDENCE` interval for the true value over the filtered, clipped
            rows of the group — count and sum: ± the noise's half-width (Laplace b·ln(1/α),
            Gaussian σ·Φ⁻¹(1 − α/2)); mean: from the count's
            and the sum's intervals at (1 − α/2) each (union bound), clamped into the bounds;
            None for variance, histogram and quantiles (see the parts' half-widths).
    """

    key: tuple[Scalar, ...]
    value: Value
    interval: tuple[float, float] | None


def part_json(part: Perturbation, *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """One perturbation as JSON, with the half-width of its per-coordinate interval
    (``scale`` is Laplace b or Gaussian σ; ``sensitivity`` Δ₁ or Δ₂ accordingly)."""
    return {
        "name": part.name,
        "noise": part.kind.value,
        "scale": part.scale,
        "sensitivity": part.sensitivity,
        "epsilon": None if part.epsilon is None else str(part.epsilon),
        "size": part.size,
        "half_width": half_width(part, alpha=1.0 - confidence),
    }


def _noise(p: Perturbation) -> str:
    if isinstance(p.kind, Selection):
        return f"{p.name}: gumbel top-{p.picks} β={p.scale:.6g} (Δ∞={p.sensitivity:.6g})"
    if p.kind is NoiseKind.LAPLACE:
        return f"{p.name}: laplace b={p.scale:.6g} (Δ={p.sensitivity:.6g})"
    return f"{p.name}: gaussian σ={p.scale:.6g} (Δ₂={p.sensitivity:.6g})"


def noise_summary(parts: tuple[Perturbation, ...]) -> str:
    """Every part's noise in one line, e.g. ``count: laplace b=2 (Δ=1); sum: ...`` or
    ``count: gaussian σ=4.1 (Δ₂=1)``."""
    return "; ".join(_noise(p) for p in parts)


def _value_json(value: Value) -> Any:
    if isinstance(value, Mapping):
        return [[literal_to_json(k), v] for k, v in value.items()]
    return value


@dataclass(frozen=True)
class QueryResult:
    """A query's DP answer and its public metadata.

    Attributes:
        query: the query answered.
        stream: its stream.
        context: the context that paid.
        blocks: the blocks read, in order.
        cost: what each block was charged (the group-privacy cost on a user-level stream; an
            RDP curve on an RDP stream).
        parts: every perturbation, with its noise scale, sensitivity and ε share.
        groups: one answer per declared group, row-major over the keys' domains.
        secure_noise: False when a caller passed a non-secure noise source (a seeded one for
            tests or experiments); such a result is not fit for release.
        resolution: the bin width of a quantile query (its answers are interpolated within
            bins of this width); None otherwise.
        confidence: the confidence of the intervals.
    """

    query: Query
    stream: str
    context: str
    blocks: tuple[str, ...]
    cost: Cost
    parts: tuple[Perturbation, ...]
    groups: tuple[GroupAnswer, ...]
    secure_noise: bool
    resolution: float | None = None
    confidence: float = CONFIDENCE

    @property
    def value(self) -> Value | dict[Any, Value]:
        """The answer: one group's value, or ``{key: value}`` over the declared groups (the
        key is the value itself with one group-by key, a tuple with several)."""
        if not self.query.keys:
            return self.groups[0].value
        if len(self.query.keys) == 1:
            return {g.key[0]: g.value for g in self.groups}
        return {g.key: g.value for g in self.groups}

    @property
    def number(self) -> float:
        """The answer of an ungrouped count, sum, mean or variance, as a float.

        Raises:
            InvalidRequestError: the answer is not one number (group-by, histogram, quantiles).
        """
        value = self.value
        if not isinstance(value, float):
            raise InvalidRequestError(
                f"a {self.query.statistic.value} query with {len(self.query.keys)} group-by "
                "key(s) answers more than one number; read .value or .groups"
            )
        return value

    @property
    def interval(self) -> tuple[float, float] | None:
        """The interval of an ungrouped answer (see :attr:`GroupAnswer.interval`)."""
        return self.groups[0].interval if not self.query.keys else None

    @property
    def noise_summary(self) -> str:
        return noise_summary(self.parts)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON (what the HTTP API returns and ``blockbudget query --json``
        prints). Mappings become ``[key, value]`` pairs so that keys keep their types;
        ``value`` and ``interval`` are null on a grouped answer (see ``groups``)."""
        out: dict[str, Any] = {
            "query": to_dict(self.query),
            "stream": self.stream,
            "context": self.context,
            "blocks": list(self.blocks),
            "cost": self.cost.to_json(),
            "parts": [part_json(p, confidence=self.confidence) for p in self.parts],
            "noise": self.noise_summary,
            "secure_noise": self.secure_noise,
            "resolution": self.resolution,
            "confidence": self.confidence,
            "groups": [
                {
                    "key": [literal_to_json(k) for k in g.key],
                    "value": _value_json(g.value),
                    "interval": None if g.interval is None else list(g.interval),
                }
                for g in self.groups
            ],
        }
        # One form for every answer (the HTTP answer's too): a grouped one's value and
        # interval are null (they are per group).
        grouped = bool(self.query.keys)
        out["value"] = None if grouped else out["groups"][0]["value"]
        out["interval"] = None if grouped else out["groups"][0]["interval"]
        return out


@dataclass(frozen=True)
class DryRun:
    """A query's price on a selection of blocks; nothing was reserved, sealed or charged.

    Attributes:
        query: the query priced.
        stream, context: where and who would pay.
        blocks: the blocks the selection resolves to now (a ``Last(n)`` selection skips the
            blocks that cannot afford the reservation, as a run would).
        cost: what each block would be charged (group privacy included).
        reserve: what a run reserves on each block while it computes.
        parts: the perturbations, with their noise scales and sensitivities.
        affordable: per block, whether the reservation fits its budget in ``context`` now
            (advisory: a run re-checks atomically).
        resolution: the bin width of a quantile query.
    """

    query: Query
    stream: str
    context: str
    blocks: tuple[str, ...]
    cost: Cost
    reserve: Cost
    parts: tuple[Perturbation, ...]
    affordable: tuple[bool, ...]
    resolution: float | None = None

    @property
    def ok(self) -> bool:
        """Whether every block can afford the query now."""
        return all(self.affordable)

    @property
    def noise_summary(self) -> str:
        return noise_summary(self.parts)

    def to_dict(self) -> dict[str, Any]:
        """The dry run as JSON."""
        return {
            "query": to_dict(self.query),
            "stream": self.stream,
            "context": self.context,
            "blocks": list(self.blocks),
            "cost": self.cost.to_json(),
            "reserve": self.reserve.to_json(),
            "parts": [part_json(p) for p in self.parts],
            "noise": self.noise_summary,
            "affordable": list(self.affordable),
            "ok": self.ok,
            "resolution": self.resolution,
        }
