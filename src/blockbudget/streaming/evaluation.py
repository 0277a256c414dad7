"""Running DPI over a whole stream and scoring it (for experiments, benchmarks and the docs).

:func:`run_dpi` feeds every slot of a :class:`~blockbudget.streaming.streams.CategoricalStream`
(or a sequence of true PDFs with one user per record) through a seeded :class:`DPIStream` and
returns per-slot rows: ε_t, spent, remaining, KL and MSE of the release against the true
instantaneous or accumulative PDF, the same for the uniform PDF, and — as a reference mechanism
spending the *same* ε_t per slot — the Laplace mechanism on the PDF (ℓ₁-sensitivity Δ_P, noise
scale Δ_P/ε_t, clipped at 0, renormalised and mixed with the same uniform share as DPI's
release). Seeded randomness only: the rows say ``secure=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from blockbudget.mechanisms import SeededNoise
from blockbudget.streaming.applications import kl_divergence, mse
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.queries import QueryPool
from blockbudget.streaming.release import DPIConfig, DPIStream, Horizon
from blockbudget.streaming.selection import SeededSelector
from blockbudget.streaming.streams import CategoricalStream
from blockbudget.streaming.synopses import PoolDesign, SynopsisPool

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Setup:
    """How a DPI stream is built for an experiment.

    Attributes:
        pool_size: N.
        precision: p.
        design: the pool design.
        min_users: the public user floor n_min.
        values: optional public per-item values for the aggregate query.
    """

    pool_size: int = 1000
    precision: float = 0.02
    design: PoolDesign = PoolDesign.DIRICHLET
    min_users: int = 1
    values: FloatArray | None = field(default=None, repr=False)


def build_stream(k: int, config: DPIConfig, setup: Setup, *, seed: int) -> DPIStream:
    """A seeded DPI stream over a domain of size k."""
    pool = SynopsisPool.generate(
        domain_size=k,
        size=setup.pool_size,
        precision=setup.precision,
        design=setup.design,
        rng=np.random.default_rng(seed),
    )
    return DPIStream(
        config=config,
        compression=Compression(k, setup.min_users),
        pool=pool,
        queries=QueryPool.standard(k, values=setup.values),
        selector=SeededSelector(np.random.default_rng(seed + 1)),
        rng=np.random.default_rng(seed + 2),
    )


def laplace_release(
    pdf: FloatArray,
    *,
    epsilon: float,
    sensitivity: float,
    noise: SeededNoise,
    smoothing: float = 0.01,
) -> FloatArray:
    """The Laplace mechanism on a PDF (scale Δ/ε), clipped at 0 and renormalised (uniform if
    nothing is left), then mixed with ``smoothing`` of the uniform PDF — the same post-processing
    DPI's release gets (``DPIConfig.smoothing``), so that KL compares the mechanisms and not a
    floor on zeros."""
    k = pdf.size
    if epsilon <= 0:
        return np.full(k, 1.0 / k)
    noisy = np.maximum(noise.add_laplace(pdf, scale=sensitivity / epsilon), 0.0)
    total = float(noisy.sum())
    clipped = noisy / total if total > 0 else np.full(k, 1.0 / k)
    return np.asarray((1.0 - smoothing) * clipped + smoothing / k, dtype=np.float64)


def run_dpi(
    slots: Iterable[Any],
    *,
    k: int,
    config: DPIConfig,
    setup: Setup,
    seed: int,
    counts: bool = False,
    laplace: bool = True,
    progress: Callable[[Iterable[Any]], Iterator[Any]] | None = None,
    extra: Callable[[int, FloatArray, FloatArray], dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Run DPI over ``slots`` — (users, items) pairs, or per-item count vectors when
    ``counts`` — and return one row per slot (see the module docstring)."""
    stream = build_stream(k, config, setup, seed=seed)
    noise = SeededNoise(seed + 3)
    uniform = np.full(k, 1.0 / k)
    accumulated = np.zeros(k)
    rows: list[dict[str, Any]] = []
    items = progress(slots) if progress is not None else slots
    for t, slot in enumerate(items, start=1):
        if counts:
            c = np.asarray(slot)
            release = stream.step_counts(c)
            n = int(c.sum())
            pad = max(0, setup.min_users - n)
            pdf = (c + pad / k) / float(n + pad)
        else:
            users, its = slot
            release = stream.step(users, its)
            pdf = stream.compression.pdf(users, its)
        accumulated += pdf
        target = accumulated / t if config.horizon is Horizon.ACCUMULATIVE else pdf
        row: dict[str, Any] = {
            "t": t,
            "epsilon_t": release.epsilon,
            "spent": float(release.spent),
            "remaining": float(release.remaining),
            "kl": kl_divergence(target, release.pdf),
            "mse": mse(target, release.pdf),
            "kl_uniform": kl_divergence(target, uniform),
            "mse_uniform": mse(target, uniform),
            "secure": release.secure_noise,
        }
        if laplace:
            lap = laplace_release(
                target,
                epsilon=release.epsilon,
                sensitivity=stream.compression.sensitivity,
                noise=noise,
                smoothing=config.smoothing,
            )
            row["kl_laplace"] = kl_divergence(target, lap)
            row["mse_laplace"] = mse(target, lap)
        if extra is not None:
            row.update(extra(t, target, release.pdf))
        rows.append(row)
    return rows


def summarise(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    """Means of ``keys`` over the rows."""
    return {key: float(np.mean([r[key] for r in rows])) for key in keys}


def stream_slots(stream: CategoricalStream, limit: int | None = None) -> list[tuple[Any, Any]]:
    """The first ``limit`` (or all) slots of a categorical stream."""
    return list(stream.slots[:limit] if limit else stream.slots)
