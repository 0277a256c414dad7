"""The service and the CLI reach data and budgets through ``Platform``'s methods only: no
module of theirs reads an attribute named ``ledger`` or ``store`` (``platform.ledger``,
``self._platform.store``, …). The check walks the syntax tree, so imports such as
``blockbudget.ledger.types`` and docstrings do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import blockbudget

ROOT = Path(blockbudget.__file__).parent
FORBIDDEN = frozenset({"ledger", "store"})


def _offences(path: Path) -> list[str]:
    """``file:line: source`` for every ``….ledger`` / ``….store`` attribute in ``path``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    name = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path
    return [
        f"{name}:{node.lineno}: {lines[node.lineno - 1].strip()}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN
    ]


def test_no_service_or_cli_module_reaches_into_the_ledger_or_the_store() -> None:
    found = [
        offence
        for package in ("service", "cli")
        for path in sorted((ROOT / package).rglob("*.py"))
        for offence in _offences(path)
    ]
    assert found == [], "go through a Platform method:\n" + "\n".join(found)


def test_the_check_names_the_offending_line_and_ignores_imports_and_text(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import blockbudget.ledger.types\n"
        '"""platform.ledger, in a docstring"""\n'
        "def f(platform):\n"
        "    return platform.ledger.events(), platform.store\n",
        encoding="utf-8",
    )
    line = "return platform.ledger.events(), platform.store"
    assert _offences(probe) == [f"{probe}:4: {line}"] * 2
