"""Pipeline kinds are an application's, registered by name: the task queue checks and builds a
task's pipeline through the registry and knows no kind of its own."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from blockbudget.apps.flights.pipelines import PIPELINE_COLUMNS, PIPELINE_KINDS
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.tasks.pipeline_kinds import (
    PipelineKind,
    get_pipeline_kind,
    load_pipeline_modules,
    pipeline_kinds,
    register_pipeline_kinds,
    unregister_pipeline_kind,
)
from blockbudget.tasks.pipeline_work import PipelineWork, build_pipeline, check_stream
from blockbudget.training import AdaSSPPipeline

from .tasks_support import make_platform


def _linear(target: float) -> AdaSSPPipeline:
    return AdaSSPPipeline(target=target, featurize=len, label=len, feature_norm=1.0)  # type: ignore[arg-type]


TOY = PipelineKind("toy-lr", "a toy regression", _linear, ("v",), delta=1e-7)


@pytest.fixture
def toy() -> Iterator[PipelineKind]:
    register_pipeline_kinds(TOY)
    yield TOY
    unregister_pipeline_kind(TOY.name)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(tmp_path / "home", days=1)
    yield p
    p.close()


def test_a_registered_kind_is_checked_priced_and_built_through_the_registry(
    toy: PipelineKind,
) -> None:
    work = PipelineWork(kind="toy-lr", target=0.5)
    assert work.delta == 1e-7 and work.demand.delta == Decimal("1e-7")  # the kind's default δ
    pipeline = build_pipeline("toy-lr", 0.25)
    assert isinstance(pipeline, AdaSSPPipeline) and pipeline.target == 0.25
    assert get_pipeline_kind("toy-lr") is toy and "toy-lr" in pipeline_kinds()


def test_an_unregistered_kind_is_refused_with_the_known_ones_listed(toy: PipelineKind) -> None:
    with pytest.raises(InvalidRequestError, match=r"unknown pipeline kind 'nope'; one of .*toy-lr"):
        PipelineWork(kind="nope", target=1.0)
    unregister_pipeline_kind("toy-lr")
    with pytest.raises(InvalidRequestError, match="unknown pipeline kind 'toy-lr'"):
        PipelineWork.from_json({"kind": "toy-lr", "target": 1.0})


def test_registering_again_changes_nothing_and_a_taken_name_is_refused(toy: PipelineKind) -> None:
    register_pipeline_kinds(toy)  # the same kind again: no change
    other = PipelineKind("toy-lr", "another", _linear, ("w",))
    fresh = PipelineKind("toy-fresh", "fresh", _linear, ("v",))
    with pytest.raises(InternalError, match="'toy-lr' is already registered"):
        register_pipeline_kinds(fresh, other)
    assert get_pipeline_kind("toy-lr") is toy and "toy-fresh" not in pipeline_kinds()


def test_a_kind_needs_a_name_columns_and_a_delta_below_one() -> None:
    for bad in (
        dict(name="", columns=("v",)),
        dict(name="k", columns=()),
        dict(name="k", columns=("v",), delta=1.0),
        dict(name="k", columns=("v",), delta=float("nan")),
    ):
        with pytest.raises(InternalError):
            PipelineKind(description="", build=_linear, **bad)  # type: ignore[arg-type]


def test_a_stream_lacking_a_kind_s_column_is_refused_by_name(
    toy: PipelineKind, platform: Platform
) -> None:
    check_stream(platform, "s", "toy-lr")  # stream s has t and v
    register_pipeline_kinds(PipelineKind("toy-w", "needs w", _linear, ("v", "w")))
    try:
        with pytest.raises(InvalidRequestError, match=r"reads columns \['v', 'w'\].*lacks \['w'\]"):
            check_stream(platform, "s", "toy-w")
    finally:
        unregister_pipeline_kind("toy-w")


def test_modules_are_loaded_by_name_and_must_list_their_kinds() -> None:
    load_pipeline_modules(["blockbudget.apps.flights.pipelines"])  # as `serve` does: idempotent
    assert {k.name: k.columns for k in PIPELINE_KINDS} == {
        "average-speed": PIPELINE_COLUMNS,
        "adassp-regression": PIPELINE_COLUMNS,
    }
    assert all(pipeline_kinds()[k.name] is k for k in PIPELINE_KINDS)
    with pytest.raises(InvalidRequestError, match="cannot be imported"):
        load_pipeline_modules(["blockbudget.no_such_module"])
    with pytest.raises(InvalidRequestError, match="PIPELINE_KINDS tuple"):
        load_pipeline_modules(["blockbudget.errors"])
