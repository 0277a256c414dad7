"""Shared test settings: hypothesis profiles that keep the suite bounded and deterministic."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from s3_support import s3_root, s3_server

__all__ = ["s3_root", "s3_server"]  # fixtures for every test module

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
