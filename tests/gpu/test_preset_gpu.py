"""`agent.bench preset=paper tasks=core llm=reference samples=1` on a real Hopper GPU, then agent.report: every
configuration's one answer is the reference (judged by the paper's rule, timed the paper's way), so every core
problem but the backward (a few rounding disagreements with cuDNN) is correct with its targets in every trajectory,
and the report sets that beside the paper's H100 numbers, naming the GPU the evaluations ran on. 13 GPU evaluations.
Skipped without an sm_90 GPU."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from agent.bench.__main__ import main as bench_main
from agent.loop.store import RunFolder
from agent.report import main as report_main
from tasks.catalog import CORE

pytestmark = pytest.mark.hopper


def test_the_paper_preset_on_the_core_five(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    args = ["preset=paper", "tasks=core", "archs=sm_90a", "llm=reference", "samples=1", f"runs_dir={runs}",
            "bench_id=paper", "concurrency=4"]  # fmt: skip
    assert bench_main(args) == 0
    err = capsys.readouterr().err
    assert "planned: 13 runs (13 task configurations × 1 archs × 1 modes × 1 samples), at most 13 GPU" in err
    # The backward answers fail the paper's element rule on a few rounding disagreements with cuDNN
    # (tests/gpu/test_criterion_gpu.py); everything else passes it.
    expected = {t: "mismatch" if t.startswith("mha_bwd") else "passed" for t in CORE}
    for folder in (runs / "paper").iterdir():
        if folder.is_dir():
            turn = RunFolder(folder).turns()[0]
            task = next(t for t in sorted(CORE, key=len, reverse=True) if folder.name.startswith(f"{t}-"))
            assert turn.evaluation.status.value == expected[task], f"{folder.name}: {turn.evaluation.message}"
    assert report_main([str(runs / "paper")]) == 0
    capsys.readouterr()
    report = (runs / "paper" / "report" / "report.md").read_text()
    section = report[report.index("## Beside the paper") :].split("\n## ")[0]
    assert "measured on H100s (sm_90a), ours on NVIDIA H" in section  # the H200 (or whichever Hopper) by name
    assert "eval.criterion=paper, eval.speedup=paper" in section
    with open(runs / "paper" / "report" / "beside_paper.csv") as f:
        pooled = [r for r in csv.DictReader(f) if r["variant"] == "all"]
    assert [r["task"] for r in pooled] == CORE
    for r in pooled:
        share = "0.0" if expected[r["task"]] == "mismatch" else "1.0"
        assert (r["correct"], r["correct_targets"], r["unverified"]) == (share, share, "0.0"), r["task"]
        assert r["paper_frontier_model"] and r["devices"].startswith("NVIDIA H")
        assert (float(r["best_speedup"]) > 0) if share == "1.0" else not r["best_speedup"], r
