"""The pipeline kinds a PIPELINE task may ask for: a registry that applications fill.

The task queue knows how to drive a privacy-adaptive pipeline (:mod:`blockbudget.tasks.pipelines`)
but not what any pipeline computes: an application describes each of its pipelines as a
:class:`PipelineKind` — a name, how to build the pipeline for a target, the stream columns its
runs read and the δ its demand asks by default — and registers it here, as schedulers register
by name (:func:`blockbudget.scheduling.get_scheduler`). A module that offers kinds lists them in
a ``PIPELINE_KINDS`` tuple; :func:`load_pipeline_modules` imports such modules by name and
registers what they list (the service's workers do so with the modules named by
``BLOCKBUDGET_PIPELINES``, which ``blockbudget serve`` sets). The registry is process-wide;
registering the same kind again changes nothing.

Example:
    >>> from blockbudget.training import AdaSSPPipeline
    >>> def build(target: float) -> AdaSSPPipeline:
    ...     return AdaSSPPipeline(target=target, featurize=..., label=..., feature_norm=1.0)
    >>> kind = PipelineKind("example-lr", "a linear regression", build, ("x", "y"), delta=1e-6)
    >>> register_pipeline_kinds(kind)
    >>> get_pipeline_kind("example-lr").columns
    ('x', 'y')
    >>> unregister_pipeline_kind("example-lr")
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from blockbudget.errors import InternalError, InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.training.pipeline import Pipeline

__all__ = [
    "PipelineKind",
    "get_pipeline_kind",
    "load_pipeline_modules",
    "pipeline_kinds",
    "register_pipeline_kinds",
    "unregister_pipeline_kind",
]


@dataclass(frozen=True)
class PipelineKind:
    """A pipeline offered to PIPELINE tasks, by name.

    Attributes:
        name: what a task's ``kind`` says (e.g. ``"average-speed"``).
        description: what it trains, in one line (shown to people).
        build: the pipeline for an SLA target τ; a module-level function (pipelines pickle).
        columns: the stream columns its runs read: a run's grant reads only these, and a
            stream that lacks one is refused at submission (a schema fact, public).
        delta: δ its demand asks per block when the task names none (0 for a pure ε-DP
            pipeline, so it never holds a block's δ that other pipelines need).

    Raises:
        InternalError: an empty name or column list, or a δ outside [0, 1).
    """

    name: str
    description: str
    build: Callable[[float], Pipeline]
    columns: tuple[str, ...]
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or not self.columns:
            raise InternalError(f"a pipeline kind needs a name and columns, got {self!r}")
        if not (math.isfinite(self.delta) and 0.0 <= self.delta < 1.0):
            raise InternalError(f"pipeline kind {self.name!r}: delta must be in [0, 1)")


_KINDS: dict[str, PipelineKind] = {}
_LOCK = threading.Lock()


def register_pipeline_kinds(*kinds: PipelineKind) -> None:
    """Offer ``kinds`` to PIPELINE tasks (again: no change).

    Raises:
        InternalError: a different kind already holds one of the names (nothing registered).
    """
    with _LOCK:
        for kind in kinds:
            held = _KINDS.get(kind.name)
            if held is not None and held != kind:
                raise InternalError(f"pipeline kind {kind.name!r} is already registered")
        _KINDS.update((kind.name, kind) for kind in kinds)


def unregister_pipeline_kind(name: str) -> None:
    """Withdraw the kind called ``name`` (absent: no change). Tasks of it fail to read back."""
    with _LOCK:
        _KINDS.pop(name, None)


def pipeline_kinds() -> dict[str, PipelineKind]:
    """The registered kinds by name (a copy)."""
    with _LOCK:
        return dict(_KINDS)


def get_pipeline_kind(name: str) -> PipelineKind:
    """The registered kind called ``name``.

    Raises:
        InvalidRequestError: no kind has that name (the message lists the known ones).
    """
    with _LOCK:
        kind = _KINDS.get(name)
        if kind is None:
            raise InvalidRequestError(f"unknown pipeline kind {name!r}; one of {sorted(_KINDS)}")
        return kind


def load_pipeline_modules(names: Iterable[str]) -> None:
    """Import each module named in ``names`` and register the kinds its ``PIPELINE_KINDS``
    tuple lists.

    Raises:
        InvalidRequestError: a module that cannot be imported or lists no ``PIPELINE_KINDS``.
        InternalError: a name already held by a different kind.
    """
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise InvalidRequestError(f"pipeline module {name!r} cannot be imported") from exc
        kinds = getattr(module, "PIPELINE_KINDS", None)
        if not isinstance(kinds, tuple) or not all(isinstance(k, PipelineKind) for k in kinds):
            raise InvalidRequestError(
                f"pipeline module {name!r} must list its kinds in a PIPELINE_KINDS tuple"
            )
        register_pipeline_kinds(*kinds)
