"""A command whose optional extra is not installed says so in one line, naming the extra and the pip command
(tools/extras.py), instead of a traceback. Each command runs in a fresh interpreter whose import of the extra's
modules fails, as it does where they are not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.sft.conftest import FIXIT
from tests.fixtures.runs import make_runs

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(make_runs.__file__).parent / "bench"
# Every module named in argv[1] is made unimportable (None in sys.modules), then argv[2:] runs as `python -m`.
SHIM = (
    "import runpy, sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


def without(modules: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHIM, modules, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def one_line(extra: str, command: str, module: str) -> str:
    return f"error: {command} needs the {extra} extra ({module} is not installed): pip install 'ptxbench[{extra}]'\n"


@pytest.mark.parametrize(
    ("blocked", "argv", "extra", "missing"),
    [
        ("uvicorn,fastapi", ["tools.serve"], "serve", "uvicorn"),
        ("mcp", ["tools.mcp", "--no-gpu"], "mcp", "mcp"),
        ("dask,distributed", ["tools.gpu.dask_scheduler"], "dask", "dask"),
        ("distributed", ["tools.gpu.dask_worker", "tcp://127.0.0.1:8786"], "dask", "distributed"),
        ("langgraph", ["agent.solve", "task=gemm", "arch=sm_90a", "llm=reference"], "agent", "langgraph"),
        ("langgraph", ["agent.bench", "tasks=gemm_n7168_k5120", "archs=sm_90a", "runs_dir=o"], "agent", "langgraph"),
        ("jinja2", ["agent.inspect", str(BENCH)], "agent", "jinja2"),
        ("tiktoken", ["agent.export_sft", str(BENCH), "format=fixit", "out=o"], "agent", "tiktoken"),
        ("transformers", ["agent.train_sft", str(FIXIT), "model=m", "out=o"], "train", "transformers"),
        ("tokenizers", ["agent.sft.tiny", "o"], "train", "tokenizers"),
    ],
)
def test_a_missing_extra_is_one_line(blocked: str, argv: list[str], extra: str, missing: str, tmp_path: Path) -> None:
    out = tmp_path / "o"  # where a command would write: nothing is written
    done = without(blocked, *[str(out) if a == "o" else a.replace("=o", f"={out}") if a.endswith("=o") else a
                              for a in argv])  # fmt: skip
    assert (done.returncode, done.stderr) == (2, one_line(extra, f"python -m {argv[0]}", missing))
    assert not out.exists()


def test_through_the_console_script_too() -> None:
    done = without("uvicorn,fastapi", "ptxbench", "serve")
    assert (done.returncode, done.stderr) == (2, one_line("serve", "python -m tools.serve", "uvicorn"))


def test_a_dask_pool_setting_without_dask(tmp_path: Path) -> None:
    done = without("distributed", "agent.solve", "task=gemm", "arch=sm_90a", "llm=reference",
                   "eval.pool=dask://127.0.0.1:1", f"runs_dir={tmp_path}")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "error: invalid settings: eval.pool: 'dask://127.0.0.1:1' needs the dask extra (distributed is not "
        "installed): pip install 'ptxbench[dask]'\n"
    )


def test_the_report_without_matplotlib_writes_its_tables_and_says_so(tmp_path: Path) -> None:
    done = without("matplotlib", "agent.report", str(BENCH), f"out={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "warning: plots skipped: matplotlib is not installed (pip install 'ptxbench[report]'); the tables are all "
        "there\n"
    )
    assert (tmp_path / "scores.csv").is_file() and not list(tmp_path.glob("*.png"))


def test_a_module_of_ours_missing_stays_a_traceback() -> None:
    done = without("agent.loop.run", "agent.solve", "task=gemm", "arch=sm_90a", "llm=reference")
    assert done.returncode == 1 and "Traceback" in done.stderr and "extra" not in done.stderr
