"""Scheduler specs: ``"name"`` or ``"name:key=value,key=value"`` of a registered scheduler.

Every registered online scheduler can run the live queue; NAMED-only ones get selector tasks
bound at entry (:mod:`blockbudget.tasks.binding`). An exact offline solver
(``offline-optimum``) is refused: it needs every task in advance.

Example:
    >>> spec = parse_spec("dpf-n:n=5")
    >>> spec.name, spec.options, spec.named_only
    ('dpf-n', {'n': 5}, True)
    >>> parse_spec("mixed-threshold").named_only
    False
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling import Scheduler, TaskShape, get_scheduler, scheduler_classes

__all__ = ["SchedulerSpec", "parse_spec"]


@dataclass(frozen=True)
class SchedulerSpec:
    """A parsed scheduler spec.

    Attributes:
        text: the spec as given; name: the registry name; options: its keyword arguments.
        cls: the scheduler class.
    """

    text: str
    name: str
    options: dict[str, Any]
    cls: type[Scheduler]

    @property
    def named_only(self) -> bool:
        """Whether the scheduler serves only tasks that name their blocks."""
        return TaskShape.OPEN not in self.cls.shapes

    def build(self, *, noise: NoiseSource | None) -> Scheduler:
        """A fresh scheduler; ``noise`` goes to schedulers that take one (unless the spec
        set it)."""
        options = dict(self.options)
        if noise is not None and "noise" in inspect.signature(self.cls).parameters:
            options.setdefault("noise", noise)
        return self.cls(**options)


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_spec(spec: str) -> SchedulerSpec:
    """Parse and check a scheduler spec (its options are checked by building it once).

    Raises:
        InvalidRequestError: a malformed option, an unknown scheduler (the message lists the
            known ones), an offline solver, or options the scheduler refuses.
    """
    if not isinstance(spec, str) or not spec:
        raise InvalidRequestError(f"a scheduler spec is a non-empty string, got {spec!r}")
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise InvalidRequestError(f"scheduler option {part!r} is not key=value (in {spec!r})")
        options[key] = _number(value)
    cls = scheduler_classes().get(name)
    if cls is None:
        get_scheduler(name)  # raises with the list of known schedulers
        raise AssertionError  # pragma: no cover
    if cls.exact:
        raise InvalidRequestError(
            f"scheduler {name!r} solves the offline problem exactly and needs every task in "
            "advance; the live queue needs an online scheduler (e.g. dpf-n, dpack, fcfs, "
            "online-threshold, mixed-threshold, sage-block-conserve)"
        )
    try:
        cls(**options)
    except TypeError:
        raise InvalidRequestError(
            f"scheduler {name!r} does not take the options {sorted(options)} (in {spec!r})"
        ) from None
    return SchedulerSpec(text=spec, name=name, options=options, cls=cls)
