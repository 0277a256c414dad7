"""What a PIPELINE task asks for: the kind of pipeline, its target and its privacy search.

A pipeline task (``WorkKind.PIPELINE``) is Sage's privacy-adaptive training (seed
``004_2b5d216070ae2ded.txt`` §3.3) as one task of the scheduler: the work is a
:class:`PipelineWork` (stored as the task's ``work`` JSON), its demand per block is
(``max_epsilon``, δ) — the most its whole search may spend on one block — and the stream's
pipeline strategy (Sage's Block/Conserve by default, §5.4) hands it budget run by run
(:mod:`blockbudget.tasks.pipelines`).

ε0 of the search. Sage's strategies try runs at ``max_epsilon / 2**k`` (k = 0 … levels), so the
first run's ε is ``max_epsilon / 2**k`` for the smallest k that brings it to ``epsilon0`` or
below: ``epsilon0`` 0.0625 of ``max_epsilon`` 1 starts at exactly 0.0625; ``epsilon0`` 0.1
starts at 0.0625 (never above what was asked). Every run's (ε, δ) is that fraction of the
demand, δ included, so a block's δ over the whole search stays within δ. δ defaults to what the
kind uses (:attr:`~blockbudget.tasks.pipeline_kinds.PipelineKind.delta`): a pure ε-DP pipeline
asks no δ, so it never holds a block's δ that other pipelines need.

The kinds are those registered in :mod:`blockbudget.tasks.pipeline_kinds` (an application's).

Example:
    >>> from blockbudget.tasks.pipeline_kinds import (
    ...     PipelineKind, register_pipeline_kinds, unregister_pipeline_kind)
    >>> register_pipeline_kinds(PipelineKind("example", "an example", print, ("x",), delta=0.0))
    >>> w = PipelineWork(kind="example", target=150.0, epsilon0=0.25)
    >>> w.levels, w.first_epsilon, w.delta
    (2, Decimal('0.25'), 0.0)
    >>> PipelineWork.from_json(w.to_json()) == w
    True
    >>> unregister_pipeline_kind("example")
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget
from blockbudget.decimals import plain_fields
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.calibration import exact_delta, exact_epsilon
from blockbudget.tasks.pipeline_kinds import get_pipeline_kind
from blockbudget.training.bounds import check_probability

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.platform import Platform
    from blockbudget.training.pipeline import Pipeline

__all__ = [
    "MAX_LEVELS",
    "PipelineWork",
    "build_pipeline",
    "check_stream",
    "describe_model",
]

#: The most doublings of ε one search may make (ε0 ≥ max_epsilon / 2**MAX_LEVELS).
MAX_LEVELS = 20


def build_pipeline(kind: str, target: float) -> Pipeline:
    """The :class:`~blockbudget.training.pipeline.Pipeline` of the registered ``kind`` with its
    target.

    Raises:
        InvalidRequestError: an unknown kind.
    """
    return get_pipeline_kind(kind).build(target)


def check_stream(platform: Platform, stream: str, kind: str) -> None:
    """Refuse a stream that lacks the columns the pipeline reads (a schema read only).

    Raises:
        InvalidRequestError: an unknown kind, or a missing column (listed).
    """
    columns = get_pipeline_kind(kind).columns
    schema = platform.store.schema(stream)
    missing = [c for c in columns if schema is None or c not in schema.names]
    if missing:
        raise InvalidRequestError(
            f"pipeline {kind!r} reads columns {list(columns)}; stream {stream!r} lacks {missing}"
        )


def describe_model(model: Any) -> str:
    """A short public description of a released (DP) model: its first public attribute."""
    for attr in ("coef_", "coefficients", "means", "value"):
        value = getattr(model, attr, None)
        if value is not None:
            return f"{type(model).__name__}: {attr}={repr(value)[:400]}"
    return repr(model)[:400]


@dataclass(frozen=True)
class PipelineWork:
    """A pipeline task's work (seed 004 §3.3; defaults as in §5: ε ≤ 1, δ = 1e-6, η = 0.05).

    Attributes:
        kind: a registered kind (:mod:`blockbudget.tasks.pipeline_kinds`).
        target: the SLA's quality target τ.
        epsilon0: the ε the search starts from (at most; see the module docstring).
        max_epsilon: the most ε the search may spend on one block (Sage's upper bound).
        min_window: the first window, in blocks.
        delta: δ of the demand per block (None: the kind's default δ).
        eta: η: all decisions of the search hold together with probability ≥ 1 − η (run i
            validates at η/(i(i+1))).
    """

    kind: str
    target: float
    epsilon0: float = 0.0625
    max_epsilon: float = 1.0
    min_window: int = 1
    delta: float | None = None
    eta: float = 0.05

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        kind = get_pipeline_kind(self.kind)
        if isinstance(self.target, bool) or not isinstance(self.target, int | float):
            raise InvalidRequestError(f"target must be a number, got {self.target!r}")
        if not math.isfinite(self.target) or self.target <= 0:
            raise InvalidRequestError(f"target must be finite and > 0, got {self.target!r}")
        eps0 = exact_epsilon(self.epsilon0, name="epsilon0")
        top = exact_epsilon(self.max_epsilon, name="max_epsilon")
        if eps0 > top:
            raise InvalidRequestError(f"epsilon0 {eps0} exceeds max_epsilon {top}")
        if top / eps0 > 2**MAX_LEVELS:
            raise InvalidRequestError(
                f"max_epsilon / epsilon0 must be at most 2**{MAX_LEVELS}, got {top / eps0}"
            )
        delta = kind.delta if self.delta is None else self.delta
        object.__setattr__(self, "delta", delta)
        exact_delta(delta, positive=False)
        check_probability(self.eta, name="eta")
        w = self.min_window
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 10_000:
            raise InvalidRequestError(f"min_window must be an int in [1, 10000], got {w!r}")

    @property
    def levels(self) -> int:
        """k: the first run spends ``max_epsilon / 2**k`` (the largest not above epsilon0)."""
        ratio = exact_epsilon(self.max_epsilon) / exact_epsilon(self.epsilon0)
        k = 0
        while 2**k < ratio:
            k += 1
        return k

    @property
    def first_epsilon(self) -> Decimal:
        """ε of the first run."""
        top: Decimal = exact_epsilon(self.max_epsilon)
        return top / Decimal(2**self.levels)

    @property
    def demand(self) -> Budget:
        """(max_epsilon, δ): the most the search may spend on one block."""
        return Budget(epsilon=self.max_epsilon, delta=self.delta or 0)

    def eta_of(self, iteration: int) -> float:
        """η_i = η/(i(i+1)) for the 1-based run ``iteration`` (Σ η_i < η)."""
        return self.eta / (iteration * (iteration + 1))

    def to_json(self) -> dict[str, Any]:
        """The stored form (the task's ``work``)."""
        return {
            "kind": self.kind,
            "target": self.target,
            "epsilon0": self.epsilon0,
            "max_epsilon": self.max_epsilon,
            "min_window": self.min_window,
            "delta": self.delta,
            "eta": self.eta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineWork:
        """Read the stored form (checked again).

        Raises:
            InvalidRequestError: a missing or unknown field, or a bad value.
        """
        if not isinstance(data, dict) or "kind" not in data or "target" not in data:
            raise InvalidRequestError(f"pipeline work needs kind and target, got {data!r}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise InvalidRequestError(f"unknown pipeline work fields {sorted(unknown)}")
        return cls(**data)
