"""`ptxbench`, the one console script: every `python -m` command is a subcommand, `help` works through it for each,
and the harness's subcommands load nothing from agent/ (a GPU host without the agent extra runs them)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ptxbench

ROOT = Path(__file__).resolve().parents[1]
HARNESS = [name for name, c in ptxbench.COMMANDS.items() if c.style != "settings"]


def test_the_console_script_is_ptxbench_main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"ptxbench": "ptxbench:main"}
    assert "ptxbench" in project["tool"]["setuptools"]["py-modules"]


def test_every_command_module_is_a_subcommand() -> None:
    agent = {f"agent.{p.stem}" for p in (ROOT / "agent").glob("*.py") if p.stem not in ("__init__", "cli")}
    harness = {"tasks.__main__", "tools.compile", "tools.evaluate", "tools.serve.__main__", "tools.mcp.__main__",
               "tools.gpu.dask_worker",
               "tools.gpu.dask_scheduler"}  # fmt: skip
    assert {c.module for c in ptxbench.COMMANDS.values()} == agent | {"agent.bench.__main__"} | harness


def test_help_lists_every_command_on_one_line(capsys: pytest.CaptureFixture) -> None:
    assert ptxbench.main(["help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, command in ptxbench.COMMANDS.items():
        [line] = [line for line in lines if line.split()[:1] == [name]]
        assert line.endswith(command.about)
    assert ptxbench.main([]) == 2 and "usage: ptxbench COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(ptxbench.COMMANDS))
def test_every_subcommand_prints_its_help(name: str, capsys: pytest.CaptureFixture) -> None:
    assert ptxbench.main([name, "help"]) == 0
    first = capsys.readouterr().out
    assert "usage" in first.lower()
    assert ptxbench.main(["help", name]) == 0
    assert capsys.readouterr().out == first


def test_a_subcommand_runs_the_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert ptxbench.main(["tasks"]) == 0
    assert "archs and their aliases:" in capsys.readouterr().out
    assert ptxbench.main(["solve", "task=gemm", "arch=sm_80", f"runs_dir={tmp_path}"]) == 2  # the command's own exit
    assert "unknown arch 'sm_80'" in capsys.readouterr().err
    assert ptxbench.main(["evaluate", str(tmp_path / "none.md"), "--task", "gemm", "--arch", "sm_90a"]) == 2
    assert "none.md" in capsys.readouterr().err
    assert ptxbench.main(["tasks", "fp8"]) == 0
    assert "fp8_mha_with_lse_d256_causal  [definition v1]" in capsys.readouterr().out
    assert ptxbench.main(["tasks", "extra"]) == 2 and "unknown task or group 'extra'" in capsys.readouterr().err


def test_an_unknown_subcommand_suggests_the_closest(capsys: pytest.CaptureFixture) -> None:
    assert ptxbench.main(["evalute", "--task", "gemm"]) == 2
    assert (
        capsys.readouterr().err
        == "error: unknown command 'evalute'; did you mean evaluate? (ptxbench help lists them)\n"
    )


def test_the_harness_subcommands_load_nothing_from_agent() -> None:
    """Each harness subcommand's help, in a fresh interpreter, and the agent modules it loaded (none)."""
    script = (
        "import contextlib, io, json, sys, ptxbench\n"
        "loaded = {}\n"
        f"for name in {HARNESS!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        code = ptxbench.main([name, 'help'])\n"
        "    loaded[name] = (code, sorted(m for m in sys.modules if m == 'agent' or m.startswith('agent.')))\n"
        "print(json.dumps(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {name: [0, []] for name in HARNESS}


def test_python_dash_m_ptxbench_is_the_same_script() -> None:
    done = subprocess.run([sys.executable, "-m", "ptxbench", "solve", "help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m agent.solve task=T arch=A")
