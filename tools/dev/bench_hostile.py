"""`python -m tools.dev.bench_hostile [--cap S]`: how long the static stages take on answers built to be slow
(a script for docs/performance.md's table, not a test; tests/adversarial asserts the bounds). Each case runs
in its own process, stopped after --cap seconds, so it also measures code from before the fixes.

- 150,000 unclosed `/* ` in the PTX block: extract → compile → sass → abi;
- 150,000 blank lines in a PTX module that assembles: the same stages, static limit 5 s;
- 10,000 trivial entries (339 KB): the same stages, static limit 5 s;
- 20,000 entries whose parameter lists never close: reading the .entry lists alone."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"
FILL = (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "agent" / "fill_ok.md").read_text()
PTX = FILL.split("```ptx\n", 1)[1].split("```", 1)[0]
SPEC = FILL.split("```json\n", 1)[1].split("```", 1)[0]


def _answer(ptx: str) -> str:
    return f"```ptx\n{ptx}\n```\n\n```json\n{SPEC}```\n"


CASES = {
    "unclosed_comments": lambda: _answer(PTX + "/* " * 150_000),
    "blank_lines": lambda: _answer(PTX.replace(".address_size 64\n", ".address_size 64\n" + "\n" * 150_000, 1)),
    "many_entries": lambda: _answer(HEADER + "".join(f".visible .entry k{i}()\n{{\nret;\n}}\n" for i in range(10_000))),
    "unclosed_entries": lambda: HEADER + "".join(f".visible .entry k{i}(.param .u64 p{i}\n" for i in range(20_000)),
}


def run_case(name: str) -> str:
    """One case in this process; returns its status."""
    from tasks import get_task
    from tasks.schema import Arch
    from tools import ptx
    from tools.options import EvalOptions
    from tools.pipeline import evaluate_answer

    text = CASES[name]()
    if name == "unclosed_entries":
        return f"{len(ptx.entries(text))} entries"
    limits = {"static_timeout_s": 5.0, "timeout_s": 5.0}  # code before the fixes has only timeout_s
    options = EvalOptions(**{k: v for k, v in limits.items() if k in EvalOptions.model_fields})
    return evaluate_answer(text, get_task("gemm"), Arch.SM_90A, options).status.value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.bench_hostile", description=__doc__)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds one case may take")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args(argv)
    if args.case:
        print(run_case(args.case))
        return 0
    print(f"{'case':<18} {'seconds':>8}  result")
    for name in CASES:
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "tools.dev.bench_hostile", "--case", name],
                                  capture_output=True, text=True, timeout=args.cap)  # fmt: skip
            result = done.stdout.strip() or f"failed: {done.stderr.strip()[-200:]}"
            seconds = f"{time.perf_counter() - start:8.1f}"
        except subprocess.TimeoutExpired:
            result, seconds = "stopped", f"> {args.cap:g}".rjust(8)
        print(f"{name:<18} {seconds}  {result}")
    print("\neach case in a fresh process (interpreter start-up included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
