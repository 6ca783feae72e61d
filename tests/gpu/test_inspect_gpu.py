"""The inspector's run page of an attempt measured on a real Hopper GPU: the reference GEMM through every stage,
its page showing the timing, the executed target counts and the executed opcode mix. Skipped without an sm_90
GPU (tests/gpu/inspect_real_runs.py is the script that also keeps the site)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.bench.inspect.site import build_site
from tests.gpu.inspect_real_runs import MARKS, page_marks, record_run
from tools.evaluation import Status
from tools.gpu.service import GpuService

pytestmark = pytest.mark.hopper


def test_a_measured_attempt_shows_what_executed(tmp_path: Path) -> None:
    with GpuService() as gpu:
        ev = record_run(tmp_path / "runs", "gemm_n7168_k5120", gpu)
    assert ev.status is Status.PASSED, ev.message
    build_site(tmp_path / "runs", tmp_path / "site")
    html = (tmp_path / "site" / "runs" / "runs" / "gemm_n7168_k5120-sm_90a-reference.html").read_text()
    assert page_marks(html) == dict.fromkeys(MARKS, True)
    assert ev.target_counts and f"{ev.target_counts['wgmma']:,}" in html and f"{ev.speedup:.3f}×" in html
