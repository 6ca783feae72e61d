"""README's two commands are the contract with a fresh machine: CI must run the test command word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.+?)\n```", section)


def test_readme_has_a_main_command_and_a_test_command():
    main, tests = readme_commands()
    assert "python -m agent.solve" in main and "llm=reference" in main
    assert "pytest" in tests and "ruff check" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
