"""README's two commands are the contract with a fresh machine: CI must run the test command word for word."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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


def readme_modules() -> list[str]:
    """Every `python -m MODULE` a code block of README shows."""
    inside, code = False, []
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            code.append(line)
    return sorted(set(re.findall(r"python3? -m ([\w.]+)", "\n".join(code))) - {"venv", "pip"})


def test_every_command_readme_shows_prints_its_help():
    modules = readme_modules()
    assert {"agent.solve", "agent.bench", "agent.report", "agent.replay", "agent.export_sft"} <= set(modules)

    def run(module: str, word: str) -> tuple[str, str, subprocess.CompletedProcess]:
        done = subprocess.run([sys.executable, "-m", module, word], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)  # fmt: skip
        return module, word, done

    words = {m: ["--help", "help"] if m.startswith("agent.") else ["--help"] for m in modules}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda mw: run(*mw), [(m, w) for m, ws in words.items() for w in ws]))
    for module, word, done in results:
        assert done.returncode == 0, f"python -m {module} {word}: {done.stderr[-500:]}"
        assert "usage" in done.stdout.lower() and "Traceback" not in done.stderr, f"{module} {word}"
