"""Feedback that says where in the kernel, on a real Hopper GPU (issue 28): a kernel hung on an mbarrier whose
expect_tx counts more bytes than its copy brings is a time-out whose feedback names the waiting PTX line and the
warps of each block, found by cuda-gdb attached to the worker, within the time-out and LOCATE_S; a correct GEMM whose
shared tiles lost their padding gets a perf feedback naming its bank-conflicting store's CUDA line, from Nsight
Compute's per-instruction counters. Skipped without an sm_90 GPU; each part is skipped, with its reason, where
cuda-gdb or ncu is missing."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from agent.loop.feedback import feedback_message
from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import MBARRIER_HANG_PTX, answer, line_of, mbarrier_hang_answer
from tools.answer import extract_solution
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu import launcher, ncu, perf
from tools.gpu.hang import LOCATE_S, find_cuda_gdb
from tools.gpu.ncu import find_ncu
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pipeline import build, evaluate_answer, extract

pytestmark = pytest.mark.hopper

TASK = get_task("gemm")
QUICK = EvalOptions(trials=1, seed=3, time=False, profile=False, timeout_s=120)
HANG_TIMEOUT_S = 5.0
COMPILE_S = 5.0  # the answer's static stages, before the run starts


def run(gpu: GpuService, text: str, options: EvalOptions = QUICK) -> Evaluation:
    return evaluate_answer(text, TASK, Arch.SM_90A, options, gpu)


def test_an_mbarrier_hang_is_located_to_its_wait_line_and_warps(gpu) -> None:
    if find_cuda_gdb() is None:
        pytest.skip("cuda-gdb is not installed here")
    assert run(gpu, answer("correct")).status is Status.PASSED  # the worker is up: its start is not the hang's time
    start = time.perf_counter()
    ev = run(gpu, mbarrier_hang_answer(), QUICK.model_copy(update={"timeout_s": HANG_TIMEOUT_S}))
    elapsed = time.perf_counter() - start
    stage = ev.stage(Stage.RUN)
    print(f"{elapsed:.1f} s\n{stage.message}")  # what the model reads, for the record
    print("cuda-gdb said:\n" + stage.detail.get("hang", {}).get("listing", "(nothing)"))  # to fix a parser by
    assert ev.status is Status.TIMEOUT, ev.message
    wait = line_of(MBARRIER_HANG_PTX, "mbarrier.try_wait")
    assert stage.detail["hang"]["groups"], stage.message
    assert f"wait at line {wait} `mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;`" in stage.message
    assert "block (0,0,0): warps 0–3" in stage.message and "block (1,0,0): warps 0–3" in stage.message
    assert "mbarrier wait on `full_bar` (through %r2), for phase parity 0" in stage.message
    assert elapsed < HANG_TIMEOUT_S + LOCATE_S + COMPILE_S
    feedback = feedback_message(ev, TASK, Arch.SM_90A, turn=1, max_turns=3, target_speedup=1.0)
    assert f"warps 0–3 wait at line {wait}" in feedback
    assert run(gpu, answer("correct")).status is Status.PASSED  # the worker came back


def test_a_bank_conflicting_store_is_named_in_the_perf_feedback(gpu) -> None:
    if find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed here")
    text = answer("bank_conflicts")
    ev = run(gpu, text, QUICK.model_copy(update={"profile": Profile.PERF}))
    assert ev.status is Status.PASSED, ev.message
    stage = ev.stage(Stage.PERF)
    print(stage.message)  # what the model reads, for the record
    assert stage.state is StageState.PASSED, stage.message
    if not ev.perf.hot_lines:  # what ncu's source page holds, to fix the parser by
        static = build(extract(TASK, Arch.SM_90A, answer=text), TASK, Arch.SM_90A, QUICK)
        with tempfile.TemporaryDirectory() as tmp:
            bundle = launcher.write_bundle(Path(tmp) / "bundle", static.module.cubin, static.module.plan)
            pages = ncu.profile_pages(launcher.command(bundle), ["-c", "1", *perf.SOURCE_COUNTERS],
                                      env=launcher.environment(gpu.device), timeout_s=300, source=True)  # fmt: skip
        print(pages.source_error, "\n".join(pages.source.splitlines()[:12]))
    assert ev.perf.hot_lines, ev.perf.hot_lines_note
    source = extract_solution(text).source
    stores = {line_of(source, "As[kk][r] ="), line_of(source, "Bs[kk][r] =")}
    top = max(ev.perf.hot_lines, key=lambda h: h.bank_conflicts)
    assert top.file == "answer.cu" and top.line in stores and top.bank_conflicts > 0, ev.perf.hot_lines
    assert f"shared-memory bank conflicts (excess wavefronts): answer.cu line {top.line} `{top.quoted}`" in (
        stage.message
    )
    feedback = feedback_message(ev, TASK, Arch.SM_90A, turn=1, max_turns=3, target_speedup=1.0)
    assert f"answer.cu line {top.line} `{top.quoted}`" in feedback
