"""Shared test settings: hypothesis profiles that keep the suite bounded and deterministic."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from s3_support import s3_root, s3_server

from blockbudget.cli.common import PIPELINE_MODULES
from blockbudget.tasks.pipeline_kinds import load_pipeline_modules

__all__ = ["s3_root", "s3_server"]  # fixtures for every test module

# The flights application's pipeline kinds, registered as `blockbudget serve` registers them.
load_pipeline_modules(PIPELINE_MODULES)

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
