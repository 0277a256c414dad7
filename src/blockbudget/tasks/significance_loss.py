"""The ``loss-reduction`` significance provider: seed 000 §VII-A's reduced validation loss,
as a DP measurement each scored block pays for (see :mod:`blockbudget.tasks.significance` for
the derivation of Δ and what it means for Alg. 1's comparison).

Seed ``000_de3e86489c8646aa.txt`` §VII-A: "the data-query significance is defined by the
reduced validation loss over the training datablock"; §IV-B: "the larger performance boost it
brings to the model, the more significant the datablock is"; §IV-A: the validation data is
public, "given in advance rather than chosen from the growing database".
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost
from blockbudget.errors import (
    BudgetExceededError,
    InvalidRequestError,
    RetiredBlockError,
    UnknownContextError,
)
from blockbudget.tasks.significance import (
    Disclosure,
    Scores,
    SignificanceProvider,
    check_blocks,
    distinct_blocks,
    number,
    params_of,
    register_provider,
)

if TYPE_CHECKING:
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform

__all__ = ["LossReduction"]


def _escape(principal: str) -> str:
    return principal.replace("%", "%25").replace(":", "%3A")


@register_provider
@dataclass(frozen=True)
class LossReduction(SignificanceProvider):
    """Seed 000 §VII-A's reduced validation loss, as a DP measurement paid by each block.

    For each block scored: a grant of the measurement's cost on that block alone (one ledger
    reservation, request id ``<holder>:significance:<task>:<block>:<nonce>``), a DP mean μ̃ of
    ``column`` clipped to [lower, upper] (:func:`~blockbudget.mechanisms.dp_mean`: ε_s split
    between a Laplace count and a Laplace sum, drawn durably *before* any noise is sampled),
    then p = min(max((v̄ − m0)² − (v̄ − μ̃)², 0), c) as in the module docstring. The grant is
    closed at once; its reservation is spent exactly, so each block is charged exactly ε_s per
    scoring (on RDP streams the Laplace curves of ε_s; on user-level streams the group cost).
    Blocks whose budget cannot pay are left out (:attr:`Scores.unscored`) and charged nothing.
    Like every grant, a measurement seals the block it reads (its rows never change after).
    Scoring again is measuring again: the caller keeps the values (e.g. in the task's row).

    Args:
        column: the numeric target column.
        lower: public lower clip of the target.
        upper: public upper clip of the target.
        validation: public validation targets v_1..v_n (finite, at least one).
        epsilon: ε_s, the measurement's price per block (> 0).
        clip: upper clip of p (default: the largest reachable reduction).
        prior: m0, the prediction before training (default (lower + upper)/2; in the range).
        seed: a seed for reproducible noise (tests, experiments): ``secure_noise=False``.

    Raises:
        InvalidRequestError: bad parameters, or a spec where no block can reduce the loss
            (v̄ = m0 after clipping), which would pay for nothing.

    Example:
        >>> lr = LossReduction(column="y", lower=0.0, upper=10.0, validation=(8.0, 9.0, 10.0),
        ...                    epsilon=0.1)
        >>> lr.sensitivity, lr.assumed, lr.cost_per_block, lr.comparison_sensitivity
        (16.0, False, Budget(epsilon='0.1', delta='0'), 0.0)
    """

    name: ClassVar[str] = "loss-reduction"
    column: str
    lower: float
    upper: float
    validation: tuple[float, ...]
    epsilon: float
    clip: float | None = None
    prior: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        from blockbudget.mechanisms.calibration import exact_epsilon
        from blockbudget.mechanisms.inputs import check_bounds

        if not isinstance(self.column, str) or not self.column:
            raise InvalidRequestError(f"column must be a column name, got {self.column!r}")
        lo = number(self.lower, what="lower")
        hi = number(self.upper, what="upper")
        lo, hi = check_bounds(lo, hi)
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        if isinstance(self.validation, (str, bytes)) or not isinstance(self.validation, Sequence):
            raise InvalidRequestError("validation must be a list of numbers")
        vals = tuple(number(v, what="a validation target") for v in self.validation)
        if not vals:
            raise InvalidRequestError("validation must hold at least one target")
        object.__setattr__(self, "validation", vals)
        object.__setattr__(self, "epsilon", number(self.epsilon, what="epsilon", positive=True))
        exact_epsilon(self.epsilon)  # representable as the ledger's exact decimal
        if self.clip is not None:
            object.__setattr__(self, "clip", number(self.clip, what="clip", positive=True))
        if self.prior is not None:
            prior = number(self.prior, what="prior")
            if not lo <= prior <= hi:
                raise InvalidRequestError(f"prior must lie in [{lo!r}, {hi!r}], got {prior!r}")
            object.__setattr__(self, "prior", prior)
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise InvalidRequestError(f"seed must be an integer, got {self.seed!r}")
        if not self.sensitivity > 0:
            raise InvalidRequestError(
                f"no block can reduce the validation loss: the validation mean "
                f"{self.validation_mean!r} equals the prior {self.start!r} within "
                f"[{lo!r}, {hi!r}]; scoring would pay for nothing"
            )

    @property
    def validation_mean(self) -> float:
        """v̄, the mean of the public validation targets."""
        return math.fsum(self.validation) / len(self.validation)

    @property
    def start(self) -> float:
        """m0, the prediction before training."""
        return self.prior if self.prior is not None else self.lower / 2.0 + self.upper / 2.0

    def reduction(self, prediction: float) -> float:
        """p for a block whose (DP) mean is ``prediction``: MSE(m0) − MSE(prediction) on the
        validation targets, clipped to [0, Δ]."""
        vbar = self.validation_mean
        raw = (vbar - self.start) ** 2 - (vbar - prediction) ** 2
        return min(max(raw, 0.0), self.sensitivity)

    @property
    def sensitivity(self) -> float:
        """Δ = c = min(clip, the largest reduction a prediction in [lower, upper] reaches)."""
        vbar = self.validation_mean
        nearest = min(max(vbar, self.lower), self.upper)
        reachable = max((vbar - self.start) ** 2 - (vbar - nearest) ** 2, 0.0)
        return reachable if self.clip is None else min(self.clip, reachable)

    @property
    def assumed(self) -> bool:
        """False: Δ is derived from the clip and the public validation data."""
        return False

    @property
    def disclosure(self) -> Disclosure:
        return Disclosure.DP_RELEASE

    @property
    def cost_per_block(self) -> Cost:
        """Budget(ε_s): the measurement is ε_s-DP for each block it reads."""
        return Budget(epsilon=self.epsilon)

    def block_cost(self, accounting: Accounting) -> Cost:
        """What one measurement draws from a block under ``accounting`` (row level)."""
        from blockbudget.mechanisms.calibration import exact_epsilon
        from blockbudget.mechanisms.source import price
        from blockbudget.mechanisms.statistics import mean_parts

        parts = mean_parts(epsilon=self.epsilon, lower=self.lower, upper=self.upper)
        return price(accounting, epsilon=exact_epsilon(self.epsilon), parts=parts)

    def _check(
        self, platform: Platform, stream: str, ids: Sequence[str], context: str
    ) -> tuple[Cost, Cost]:
        """Everything that can refuse, before anything is reserved; returns a block's per-row
        cost (what :meth:`Platform.request` takes) and its group cost (what it reserves)."""
        import pyarrow as pa

        from blockbudget.grant import group_cost
        from blockbudget.ledger import validate_context_name

        spec = platform.stream(stream)
        validate_context_name(context)
        if context not in platform.contexts():
            raise UnknownContextError(f"context {context!r} is not open")
        schema = platform.store.schema(stream)
        if schema is None or self.column not in schema.names:
            raise InvalidRequestError(f"stream {stream!r} has no column {self.column!r} to score")
        kind = schema.field(self.column).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise InvalidRequestError(
                f"loss-reduction needs a numeric column; {self.column!r} is {kind}"
            )
        check_blocks(platform, stream, ids)
        cost = self.block_cost(spec.accounting)
        return cost, group_cost(cost, platform.group_size(stream), accounting=spec.accounting)

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
        """Measure each block (see the class docstring).

        Raises:
            InvalidRequestError / UnknownBlockError / UnknownContextError: a bad stream,
                column, block list or context — refused before any block is charged.
            DataError: a block's files could not be read; that block is charged nothing, the
                blocks measured before it keep their charges.
        """
        from blockbudget.mechanisms.noise import SeededNoise, resolve_noise

        ids = distinct_blocks(block_ids)
        if not isinstance(task, str) or not task:
            raise InvalidRequestError(f"task must be a task id, got {task!r}")
        per_row, reserve = self._check(platform, stream, ids, context)
        if noise is None and self.seed is not None:
            noise = SeededNoise(self.seed)  # reproducible, and says secure_noise=False
        sampler = resolve_noise(noise)
        affordable = platform.can_afford(ids, reserve, context=context, stream=stream)
        values: dict[str, float] = {}
        charged: list[tuple[str, Cost]] = []
        reservations: list[str] = []
        for block, ok in zip(ids, affordable, strict=True):
            measured = None
            if ok:  # advisory; the ledger re-checks and may still refuse (nothing charged)
                measured = self._measure(
                    platform, stream, block, per_row, context, task, holder, sampler
                )
            if measured is not None:
                values[block], cost, rid = measured
                charged.append((block, cost))
                reservations.append(rid)
        return Scores(
            values=values,
            unscored=tuple(b for b in ids if b not in values),
            charged=tuple(charged),
            reservations=tuple(reservations),
            secure_noise=sampler.secure,
        )

    def _measure(
        self,
        platform: Platform,
        stream: str,
        block: str,
        per_row: Cost,
        context: str,
        task: str,
        holder: str,
        noise: NoiseSource,
    ) -> tuple[float, Cost, str] | None:
        """One block: reserve, draw (charged before noise), close; None if refused."""
        import pyarrow as pa

        from blockbudget.mechanisms.statistics import dp_mean

        rid = f"{_escape(holder)}:significance:{task}:{block}:{uuid.uuid4().hex[:16]}"
        try:
            grant = platform.request(
                stream,
                blocks=[block],
                budget=per_row,
                context=context,
                holder=holder,
                request_id=rid,
                columns=[self.column],
            )
        except (BudgetExceededError, RetiredBlockError):
            return None
        with grant:
            column = grant.data.column(self.column).cast(pa.float64())
            result = dp_mean(
                grant,
                column.to_numpy(zero_copy_only=False),
                epsilon=self.epsilon,
                lower=self.lower,
                upper=self.upper,
                noise=noise,
                label=f"significance:{task}",
            )
            spent = grant.spent
        return self.reduction(result.value), spent, grant.reservation.id

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "provider": self.name,
            "column": self.column,
            "lower": self.lower,
            "upper": self.upper,
            "validation": list(self.validation),
            "epsilon": self.epsilon,
        }
        for key in ("clip", "prior", "seed"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LossReduction:
        params_of(
            params,
            required=["column", "lower", "upper", "validation", "epsilon"],
            optional=["clip", "prior", "seed"],
            name=cls.name,
        )
        validation = params["validation"]
        if not isinstance(validation, list):
            raise InvalidRequestError(f"validation must be a list of numbers, got {validation!r}")
        return cls(
            column=params["column"],
            lower=params["lower"],
            upper=params["upper"],
            validation=tuple(validation),
            epsilon=params["epsilon"],
            clip=params.get("clip"),
            prior=params.get("prior"),
            seed=params.get("seed"),
        )
