"""Tools mode on a real Hopper GPU through the local pool: `python -m agent.solve task=gemm arch=sm_90a mode=tools
llm=reference` compiles, evaluates and submits the reference GEMM, which passes with its targets executed, each
GPU evaluation counted once (the submit answered from the evaluate's cache). Skipped without an sm_90 GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.loop.records import ToolStep
from tests.agent.helpers import solve

pytestmark = pytest.mark.hopper


def test_the_reference_gemm_submits_a_passed_attempt(tmp_path: Path) -> None:
    code, folder = solve(["task=gemm", "arch=sm_90a", "mode=tools", "llm=reference", f"runs_dir={tmp_path}"])
    assert code == 0
    calls = [s for s in folder.steps() if isinstance(s, ToolStep)]
    assert [(c.name, c.gpu_evaluation, c.cached) for c in calls] == [
        ("compile", False, False), ("evaluate", True, False), ("submit", False, True)
    ]  # fmt: skip
    assert "PASSED" in calls[1].result.splitlines()[0] and "targets met: True" in calls[1].result
    summary = folder.summary()
    assert summary.stop_reason == "submitted" and summary.tools.submitted and summary.tools.evaluations == 1
    assert summary.statuses == ["passed"] and summary.per_turn[0].targets_met is True
