"""TOP_K: the ``k`` most frequent of a column's declared categories, by one-shot Gumbel noise.

The exact count of every declared category is computed (values outside the categories are
dropped), Gumbel noise of scale β = k·Δ/ε is added to each count, and only the indices of the
``k`` largest noisy counts are released, best first — never a count. The answer maps each
selected category to its rank (1 the most frequent); the other categories are left out.

Privacy (add/remove one row, Δ = 1): one row moves exactly one count, by one, so the scores
are monotone with L∞ sensitivity 1. One-shot Gumbel top-k has the distribution of k rounds of
peeling with the exponential mechanism that picks i with probability ∝ exp(cᵢ/β) (Durfee &
Rogers, "Practical Differentially Private Top-k Selection with Pay-what-you-get Composition",
NeurIPS 2019, Lemma 4.2); on monotone scores each round is (Δ/β) = (ε/k)-DP (McSherry &
Talwar 2007, Thm 6, with the monotone factor of Dwork & Roth 2014 §3.4), so k rounds are ε-DP
(basic composition). Each round is also (ε/k)-bounded-range, hence (ε/k)²/8-zCDP (Cesar &
Rogers, ALT 2021, Lemma 3.2): the release is described as k exponential-mechanism selections
(:class:`~blockbudget.accounting.rule.Noise` ``EXPONENTIAL``), which (ε, δ) rules charge as ε,
RDP rules as the k bounded-range curves, and GDP as k pure-(ε/k) parts. Group-by: every row is
in one group, so the groups' selections compose in parallel.

The secure sampler is OpenDP's noisy top-k with Gumbel noise (``make_noisy_top_k``); a seeded
source uses NumPy's Gumbel draws (and the result says ``secure_noise=False``). The query takes
no mechanism but the default: a top-k is pure ε-DP.

Example:
    >>> from blockbudget.query import Query
    >>> q = Query.of("top_k", "c", categories=["a", "b", "c"], k=2, epsilon=1)
    >>> (part,) = STATISTIC.perturbations(q, None)
    >>> part.kind.value, part.scale, part.picks, part.size
    ('gumbel', 2.0, 2, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.calibration import exact_epsilon, laplace_scale
from blockbudget.mechanisms.noise import NoiseKind, Selection
from blockbudget.mechanisms.results import Perturbation
from blockbudget.query.statistic import (
    Answer,
    DPStatistic,
    NoisyGroup,
    Param,
    check_categories,
    register_statistic,
)

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


class TopK(DPStatistic):
    """The k most frequent declared categories, by one-shot Gumbel noise (pure ε-DP)."""

    name = "top_k"
    takes = frozenset({"categories"})
    params = (Param("k", int, "how many categories to select (1 ≤ k ≤ the categories)"),)
    mechanisms = frozenset({NoiseKind.LAPLACE})
    example: ClassVar[dict[str, Any]] = {"column": "n", "categories": [0, 1, 2, 9], "k": 2}

    def check(self, query: Query) -> None:
        cats = check_categories(query)
        k = query.param("k")
        if not isinstance(k, int) or not 1 <= k <= len(cats):
            raise InvalidRequestError(
                f"a DP top_k needs 1 ≤ k ≤ {len(cats)} (its categories), got k={k!r}"
            )

    def width(self, query: Query) -> int:
        return len(query.categories or ())

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        cats = query.categories
        return (Aggregate("counts", AggKind.CATEGORIES, query.column, categories=cats),)

    def perturbations(self, query: Query, accounting: str | None) -> tuple[Perturbation, ...]:
        """One Gumbel selection of k per group, β = k·Δ/ε rounded up (Δ = 1)."""
        k = int(query.param("k"))
        eps = exact_epsilon(query.epsilon)
        # β = Δ/(ε/k) = k/ε: the Laplace calibration's rounding up of Δ'/ε with Δ' = k·Δ
        scale = laplace_scale(sensitivity=float(k), epsilon=eps)
        size = query.groups * self.width(query)
        return (Perturbation("counts", Selection.GUMBEL, scale, 1.0, size, eps, picks=k),)

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        ranks = noisy.vectors["counts"]
        cats = query.categories or ()
        k = int(query.param("k"))
        chosen = sorted((k + 1 - int(r), c) for c, r in zip(cats, ranks, strict=True) if r > 0)
        return {c: float(rank) for rank, c in chosen}, None


STATISTIC = register_statistic(TopK())
