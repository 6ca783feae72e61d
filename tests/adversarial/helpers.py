"""What every adversarial case checks: our commands run as a user runs them (a real subprocess, a fresh
interpreter), their exit status, a one-line `error:` naming what was wrong, and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


def command(module: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = 120) -> Result:
    """`python -m MODULE ARGS…` from the repository root."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return Result(done.returncode, done.stdout, done.stderr, time.perf_counter() - start)


def assert_refused(result: Result, code: int, *words: str) -> str:
    """Exit `code`, no traceback, and an `error:` line holding every one of `words`; returns that line."""
    assert "Traceback" not in result.err, result.err
    assert result.code == code, (result.code, result.err)
    line = next((x for x in result.err.splitlines() if x.startswith("error:")), "")
    for word in words:
        assert word in line, (word, result.err)
    return line


def answer(ptx: str, spec: str) -> str:
    """A Markdown answer with one ```ptx block and one ```json block, as a model writes it."""
    return f"Here it is.\n\n```ptx\n{ptx}\n```\n\n```json\n{spec}\n```\n"


def fill_ok() -> str:
    """A well-formed answer whose PTX assembles and whose spec matches (tests/fixtures/agent/fill_ok.md)."""
    return (FIXTURES / "agent" / "fill_ok.md").read_text()
