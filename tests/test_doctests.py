"""Every docstring example in the package runs as part of ``make test``.

Examples that need a server, a cluster or a principal's live reservation are marked
``# doctest: +SKIP`` at the line; everything else must pass as written.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import blockbudget

#: Modules whose import needs an optional extra that a minimal install lacks; they are still
#: run when the extra is installed (as under ``make test``).
_OPTIONAL = {"ray": "blockbudget.engine.ray_engine", "torch": "blockbudget.training"}


def _modules_with_examples() -> list[str]:
    names = ["blockbudget"]
    for info in pkgutil.walk_packages(blockbudget.__path__, prefix="blockbudget."):
        if info.name.endswith("__main__"):
            continue
        spec = importlib.util.find_spec(info.name)
        origin = spec.origin if spec else None
        if origin and origin.endswith(".py"):
            with open(origin, encoding="utf-8") as fh:
                if ">>> " in fh.read():
                    names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_the_package_has_examples() -> None:
    # A walk that finds nothing would make every case below vanish silently.
    assert len(MODULES) >= 40


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    for extra, prefix in _OPTIONAL.items():
        if name.startswith(prefix):
            pytest.importorskip(extra)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
