"""The seeds' tables and figures, reproduced on offline data.

Every experiment is a module in this package that defines ``EXPERIMENTS``, a list of
:class:`Experiment`. The registry finds them by walking the package, so adding an experiment
means adding a module — nothing else to edit. ``blockbudget experiment NAME [--quick]`` runs one;
the ``--quick`` form is small enough to run in the test suite.
"""

from __future__ import annotations

import importlib
import pkgutil

from blockbudget.errors import InvalidRequestError
from blockbudget.experiments.common import Experiment, ExperimentContext, ExperimentResult

__all__ = [
    "Experiment",
    "ExperimentContext",
    "ExperimentResult",
    "all_experiments",
    "get_experiment",
]

_SKIP = {"common", "plotting"}


def all_experiments() -> dict[str, Experiment]:
    """Every registered experiment, by name (modules are imported on first call).

    Raises:
        InternalError: two modules register the same name.
    """
    found: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _SKIP or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for experiment in getattr(module, "EXPERIMENTS", []):
            if experiment.name in found:
                from blockbudget.errors import InternalError

                raise InternalError(f"experiment {experiment.name!r} is registered twice")
            found[experiment.name] = experiment
    return found


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``.

    Raises:
        InvalidRequestError: no experiment has that name (the message lists the known ones).
    """
    experiments = all_experiments()
    if name not in experiments:
        known = ", ".join(sorted(experiments)) or "none"
        raise InvalidRequestError(f"unknown experiment {name!r}; known experiments: {known}")
    return experiments[name]
