"""Dependencies point down the layers drawn in docs/architecture.md.

Every import of a ``blockbudget`` module — at module level, inside a function or under
``TYPE_CHECKING`` — from one top-level unit (a subpackage or a root module) to another must go
to a unit at the same layer or below. A new top-level unit fails the test until it is placed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import blockbudget

#: The layers, top first, as docs/architecture.md draws them.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(group)
    for group in (
        {"cli"},
        {"experiments"},
        {"apps"},
        {"render"},
        {"migrations"},
        {"service"},
        {"tasks"},
        {"training"},
        {"scheduling"},
        {"streaming"},
        {"series"},
        {"query"},
        {"platform", "platform_budget", "grant", "selection", "userids", "affordance", "lowbudget"},
        {"mechanisms"},
        {"store"},
        {"engine"},
        {"ledger"},
        {"accounting"},
        {"budget", "outcome", "dbrevision", "decimals", "registered"},
        {"data"},
        {"errors", "failures"},
    )
)
RANK = {unit: i for i, group in enumerate(LAYERS) for unit in group}
ROOT = Path(blockbudget.__file__).parent


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("blockbudget.")}
    return found


def test_every_unit_has_a_layer() -> None:
    units = {_unit(p) for p in ROOT.rglob("*.py")} - {"__init__"}
    assert units - RANK.keys() == set(), "place new units in LAYERS and docs/architecture.md"


def test_dependencies_point_down() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(path)
        if unit == "__init__":  # the package's lazy public API re-exports from every layer
            continue
        for target in _imports(path) - {unit}:
            if RANK[target] < RANK[unit]:
                upward.append(f"{path.relative_to(ROOT)} imports {target}")
    assert upward == []


#: The units that may read the flights demo data: the applications and the experiments built on
#: it (the library's layers take an application's data through parameters and registries).
FLIGHTS_READERS = {"apps", "experiments", "data"}


def _modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_only_applications_read_the_flights_data() -> None:
    readers = {
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if "blockbudget.data.flights" in _modules(path)
    }
    assert readers, "the check would pass vacuously"
    assert {r for r in readers if r.split("/")[0] not in FLIGHTS_READERS} == set()


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from blockbudget.service.app import create_app\n")
    assert "service" in _imports(bad) and RANK["service"] < RANK["ledger"]
