"""Sensitivity compression: one slot's user records → a PDF over a declared domain.

Seed ``002_e6d4c77f2abb3a16.txt`` §4.1: DPI releases probability distributions, not counts, because
two PDFs differ by at most 2 in ℓ₁ (``Δ_Q = ‖D − D'‖₁ ≤ 2``) however many records a user has.

We build the slot's PDF user by user: each user's records in the slot form that user's own
histogram,
normalised to mass 1, and the slot's PDF is the average of the users' histograms. With a *public*
floor ``n_min`` on the number of users per slot (declared with the stream; 1 gives the paper's
Δ = 2), a slot with fewer users is padded with ``n_min − n`` uniform pseudo-users, so adding,
removing or changing one user (with any number of records) moves the PDF by at most
``Δ_P = 2/n_min`` in ℓ₁: (i) n ≥ n_min: ``‖S/n − (S − h)/(n − 1)‖₁ ≤ 2/n``; (ii) n < n_min: one
padding user is swapped for the real one, ``‖h − u‖₁/n_min ≤ 2/n_min``. The floor is public and
data-independent, so Δ_P is a constant of the stream. Categories must lie in the declared domain
``[0, k)``; the domain never comes from the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_fields
from blockbudget.errors import DataError, InvalidRequestError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Compression:
    """The declared domain and public user floor of a stream.

    Attributes:
        domain_size: k, the number of categories (items 0 … k−1).
        min_users: the public floor n_min on users per slot (≥ 1); Δ_P = 2/n_min.
    """

    domain_size: int
    min_users: int = 1

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        for name in ("domain_size", "min_users"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(f"{name} must be an int >= 1, got {value!r}")

    @property
    def sensitivity(self) -> float:
        """Δ_P = 2/n_min: the ℓ₁ distance between the PDFs of two neighbouring slots."""
        return 2.0 / self.min_users

    def pdf(self, users: npt.ArrayLike, items: npt.ArrayLike) -> FloatArray:
        """The slot's compressed PDF (sums to 1) from parallel arrays of user ids and items.

        Raises:
            DataError: the arrays differ in length, or an item is not an int in ``[0, k)`` (the
                message does not quote the private value).
        """
        user_arr = np.asarray(users)
        item_arr = np.asarray(items)
        if user_arr.shape != item_arr.shape or user_arr.ndim != 1:
            raise DataError(
                f"users and items must be 1-d arrays of the same length, got shapes "
                f"{user_arr.shape} and {item_arr.shape}"
            )
        k = self.domain_size
        if item_arr.size and (
            not np.issubdtype(item_arr.dtype, np.integer)
            or int(item_arr.min()) < 0
            or int(item_arr.max()) >= k
        ):
            raise DataError(f"every item must be an int in the declared domain [0, {k})")
        if item_arr.size == 0:
            return np.full(k, 1.0 / k)
        _, inverse, per_user = np.unique(user_arr, return_inverse=True, return_counts=True)
        n_users = len(per_user)
        weights = 1.0 / per_user[inverse]
        mass = np.bincount(item_arr.astype(np.int64), weights=weights, minlength=k)
        pad = max(0, self.min_users - n_users)
        denominator = float(n_users + pad)
        pdf = (mass + pad / k) / denominator
        return np.asarray(pdf / pdf.sum(), dtype=np.float64)
