"""Named strategies: "AVG", "Geo", "Flip-Geo", "AC-Flip-Geo", "bl-Ty", "AC-bl-Ty", "Flip-Ty"…

Source: seed ``003_a7fa9cb9080a05af.txt``, §4–5 and §7.1.

A :class:`Strategy` is the recipe seed 003 names its methods by (§5.1 "Flip-", §5.3 "AC-",
§7.1 "bl-"): a base series with its ideal parameter for n, calibrated over n terms (Eq. 17),
optionally flipped (geometric: horizontally, Eq. 19–20; Taylor: vertically, Eq. 21), optionally
blended with the average at α = 1 ("bl-") and/or compounded to an acceptable budget ("AC-",
Eq. 28–30). :meth:`Strategy.build` turns it into n terms for a total ε;
:func:`parse_strategy` reads the paper's names.

Order of operations (the paper's figures): calibrate → flip → bl- → AC-.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum

from blockbudget.budget import Number, to_decimal
from blockbudget.errors import InvalidRequestError
from blockbudget.series.acceptable import ac_compound, blend, check_noise_bound
from blockbudget.series.sequence import FiniteBudgetSequence, check_count
from blockbudget.series.strategies import (
    CORMODE_RATIO,
    TaylorCentre,
    average,
    calibrate,
    flip_horizontal,
    flip_vertical,
    geometric,
    ideal_initial_term,
    ideal_ratio,
    taylor,
)


class Base(Enum):
    """The series a strategy starts from.

    Attributes:
        AVG: ε/n each.
        GEO: geometric with r = (n − 1)/n (Eq. 14).
        TY: Taylor with t from :func:`~blockbudget.series.strategies.ideal_initial_term`.
        BISECTION: geometric with r = 1/2.
        CORMODE: geometric with r = 2^{−1/3}.
    """

    AVG = "AVG"
    GEO = "Geo"
    TY = "Ty"
    BISECTION = "Bisection"
    CORMODE = "Cormode"


class Flip(Enum):
    """How a strategy is flipped (seed 003 §5.1)."""

    NONE = "none"
    HORIZONTAL = "horizontal"  # Eq. 19–20, the "Flip-" of geometric strategies
    VERTICAL = "vertical"  # Eq. 21, the "Flip-" of Taylor strategies


@dataclass(frozen=True)
class Strategy:
    """A named budget allocation recipe.

    Args:
        base: the series.
        flip: the flip applied after calibration.
        blended: apply "bl-" (compound with α = 1, §7.1).
        noise_bound: U_s for "AC-" compounding (Eq. 28–30), or None.
        centre: how the Taylor t is chosen (MIDDLE reproduces the paper's Table 4).

    Raises:
        InvalidRequestError: for a flip of AVG or a bad combination.
    """

    base: Base
    flip: Flip = Flip.NONE
    blended: bool = False
    noise_bound: Decimal | None = None
    centre: TaylorCentre = TaylorCentre.MIDDLE

    def __post_init__(self) -> None:
        if not isinstance(self.base, Base):
            raise InvalidRequestError(f"base must be a Base, got {self.base!r}")
        if not isinstance(self.flip, Flip):
            raise InvalidRequestError(f"flip must be a Flip, got {self.flip!r}")
        if self.base is Base.AVG and (self.flip is not Flip.NONE or self.blended):
            raise InvalidRequestError("the average allocation cannot be flipped or blended")
        if self.noise_bound is not None:
            object.__setattr__(self, "noise_bound", check_noise_bound(self.noise_bound))

    @property
    def name(self) -> str:
        """The paper's name: [AC-][bl-][Flip-]Base."""
        name = self.base.value
        if self.flip is not Flip.NONE:
            name = f"Flip-{name}"
        if self.blended:
            name = f"bl-{name}"
        if self.noise_bound is not None:
            name = f"AC-{name}"
        return name

    def with_noise_bound(self, u_s: Number | None) -> Strategy:
        """The same recipe with another U_s (None removes "AC-")."""
        bound = None if u_s is None else to_decimal(u_s, name="U_s")
        return Strategy(
            base=self.base,
            flip=self.flip,
            blended=self.blended,
            noise_bound=bound,
            centre=self.centre,
        )

    def base_sequence(
        self, n: int, *, epsilon: Number, parameter_n: int | None = None
    ) -> FiniteBudgetSequence:
        """n calibrated terms of the base series, its parameter chosen for ``parameter_n``.

        ``parameter_n`` (default n) is what sets r = (N−1)/N or t; the noisy-n protection
        (Eq. 36) passes a noisy N here while still drawing n terms.
        """
        n = check_count(n)
        p = n if parameter_n is None else check_count(parameter_n, name="parameter_n")
        if self.base is Base.AVG:
            return average(n, epsilon=epsilon)
        if self.base is Base.TY:
            seq = taylor(epsilon=epsilon, initial=ideal_initial_term(p, centre=self.centre), n=n)
        else:
            ratio = {
                Base.GEO: ideal_ratio(p) if p >= 2 else Decimal("0.5"),
                Base.BISECTION: Decimal("0.5"),
                Base.CORMODE: CORMODE_RATIO,
            }[self.base]
            seq = geometric(epsilon=epsilon, ratio=ratio, n=n)
        assert isinstance(seq, FiniteBudgetSequence)
        return calibrate(seq).renamed(self.base.value)

    def transform(self, sequence: FiniteBudgetSequence) -> FiniteBudgetSequence:
        """Apply flip, bl- and AC- (in that order) to a calibrated sequence."""
        seq = sequence
        if self.flip is Flip.HORIZONTAL:
            seq = flip_horizontal(seq)
        elif self.flip is Flip.VERTICAL:
            seq = flip_vertical(seq)
        if self.blended:
            seq = blend(seq)
        if self.noise_bound is not None:
            seq = ac_compound(seq, u_s=self.noise_bound)
        return seq.renamed(self.name)

    def build(
        self, n: int, *, epsilon: Number, parameter_n: int | None = None
    ) -> FiniteBudgetSequence:
        """The strategy's n budget terms for a total ε (they sum to at most ε).

        Raises:
            InvalidRequestError: if n is too small for the base (Taylor FLOOR needs n ≥ 4) or
                U_s is below Lemma 2's bound.
        """
        return self.transform(self.base_sequence(n, epsilon=epsilon, parameter_n=parameter_n))


_NAME = re.compile(
    r"^(?P<ac>AC-)?(?P<bl>bl-)?(?P<flip>Flip-)?(?P<base>AVG|Geo|Ty|Bisection|Cormode)$", re.I
)


def parse_strategy(
    name: str, *, noise_bound: Number | None = None, centre: TaylorCentre = TaylorCentre.MIDDLE
) -> Strategy:
    """A strategy from the paper's name, e.g. ``"AC-Flip-Geo"``, ``"bl-Ty"``, ``"AVG"``.

    "Flip-" means horizontal for geometric bases and vertical for Taylor (§5.1).

    Args:
        name: [AC-][bl-][Flip-](AVG|Geo|Ty|Bisection|Cormode), case-insensitive.
        noise_bound: U_s, required with "AC-" and refused without it.
        centre: the Taylor t convention.

    Raises:
        InvalidRequestError: for an unknown name or a missing/unexpected U_s.
    """
    match = _NAME.match(name.strip()) if isinstance(name, str) else None
    if match is None:
        raise InvalidRequestError(
            f"unknown strategy {name!r}; expected [AC-][bl-][Flip-](AVG|Geo|Ty|Bisection|Cormode)"
        )
    base = next(b for b in Base if b.value.lower() == match["base"].lower())
    flip = Flip.NONE
    if match["flip"]:
        flip = Flip.VERTICAL if base is Base.TY else Flip.HORIZONTAL
    if match["ac"] and noise_bound is None:
        raise InvalidRequestError(f"strategy {name!r} needs noise_bound= (U_s)")
    if not match["ac"] and noise_bound is not None:
        raise InvalidRequestError(f"strategy {name!r} has no AC- prefix but noise_bound was given")
    bound = None if noise_bound is None else to_decimal(noise_bound, name="U_s")
    return Strategy(
        base=base, flip=flip, blended=bool(match["bl"]), noise_bound=bound, centre=centre
    )
