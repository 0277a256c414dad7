"""Opacus' DP-SGD step with its Gaussian noise drawn from a platform noise source.

Opacus draws the gradient noise with ``torch.normal`` on a torch generator; its ``secure_mode``
(a CSPRNG plus the sum-of-Gaussians trick against floating-point attacks) needs the
``torchcsprng`` package, which is not built for the torch this project pins. This optimizer keeps
everything else of Opacus' :class:`~opacus.optimizers.DPOptimizer` — per-example clipping to C,
summing, division by the expected batch size, the accountant's step hook — and perturbs the
clipped sum through a :class:`~blockbudget.mechanisms.noise.NoiseSource` instead:
:class:`~blockbudget.mechanisms.noise.SecureNoise` (OpenDP's floating-point-safe Gaussian, fresh
OS entropy, the default) or :class:`~blockbudget.mechanisms.noise.SeededNoise` (experiments).
All parameters are perturbed in one call per step, at standard deviation σ·C.

Imported only when a DP-SGD model trains (importing torch costs seconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from opacus.optimizers import DPOptimizer

from blockbudget.errors import InternalError
from blockbudget.mechanisms.noise import NoiseSource


class NoiseSourceOptimizer(DPOptimizer):  # type: ignore[misc]  # opacus is untyped
    """A :class:`~opacus.optimizers.DPOptimizer` whose noise comes from ``noise``.

    Args:
        optimizer: the wrapped torch optimizer.
        noise: where the Gaussian noise comes from.
        **kwargs: DPOptimizer's (noise_multiplier, max_grad_norm, expected_batch_size,
            loss_reduction).
    """

    def __init__(self, optimizer: Any, *, noise: NoiseSource, **kwargs: Any) -> None:
        super().__init__(optimizer, **kwargs)
        self._noise = noise

    def add_noise(self) -> None:
        """Set each parameter's ``grad`` to its clipped sum plus N(0, (σC)²) per coordinate."""
        sums = [p.summed_grad for p in self.params]
        if any(getattr(s, "_processed", False) for s in sums):
            raise InternalError("a clipped gradient sum was noised twice (zero_grad was skipped)")
        flat = torch.cat([s.detach().reshape(-1) for s in sums]).to(torch.float64).numpy()
        noisy = self._noise.add_gaussian(
            np.ascontiguousarray(flat), sigma=float(self.noise_multiplier * self.max_grad_norm)
        )
        offset = 0
        for p, s in zip(self.params, sums, strict=True):
            size = int(s.numel())
            chunk = torch.as_tensor(noisy[offset : offset + size]).to(p.dtype)
            p.grad = chunk.view_as(p)
            offset += size
            s._processed = True  # the flag DPOptimizer checks before reusing a sum
