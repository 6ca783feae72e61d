"""The floors of the tree (README, Layout): tasks/ and tools/ import nothing from agent/, and no module under
agent/ imports a command module (the thin `python -m agent.X` entry points), so each command stays thin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {f"agent.{p.stem}" for p in (ROOT / "agent").glob("*.py") if p.stem not in ("__init__", "cli")}
COMMANDS.add("agent.bench.__main__")


def imported(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (`from a.b import c` counts a.b and a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("floor", ["tasks", "tools"])
def test_the_lower_floors_import_nothing_from_agent(floor: str) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in imported(p) if n == "agent" or n.startswith("agent."))
                 for p in (ROOT / floor).rglob("*.py")}  # fmt: skip
    assert {p: names for p, names in offenders.items() if names} == {}


def test_no_agent_module_imports_a_command() -> None:
    assert "agent.solve" in COMMANDS and "agent.rl_prompts" in COMMANDS
    offenders = {str(p.relative_to(ROOT)): sorted(imported(p) & (COMMANDS - {f"agent.{p.stem}"}))
                 for p in (ROOT / "agent").rglob("*.py")}  # fmt: skip
    assert {p: names for p, names in offenders.items() if names} == {}
