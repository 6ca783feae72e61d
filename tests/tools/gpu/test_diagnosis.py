"""A kernel fault is located by compute-sanitizer's memcheck on a copy of the module assembled with line
information, and a mismatch is looked at with racecheck when asked: the real GpuService, a stand-in worker that
reports the failure (tests/tools/gpu/stub_worker.py), and a stand-in compute-sanitizer — a real executable that
keeps the cubin it was handed, writes the launcher's address table as the launcher does, and prints a report
recorded on the H200 whose line numbers are set to the answer's faulting lines."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import OOB_CUDA, OOB_PTX, RACY_PTX, elementwise_answer, line_of
from tools.evaluation import Stage, StageState, Status
from tools.gpu.base import CompiledModule
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import build, extract
from tools.toolchain import find_tool

RECORDED = Path(__file__).parents[2] / "fixtures" / "gpu" / "recorded"
GEMM = get_task("gemm")
C_BYTES = 8192 * 7168 * 2
FAKE_SANITIZER = """\
import os, pathlib, shutil, sys
args = sys.argv[1:]
bundle = pathlib.Path(args[-1])
shutil.copy(bundle / "kernel.cubin", os.environ["FAKE_SANITIZER_CUBIN"])
(bundle / "addresses.json").write_text(os.environ["FAKE_SANITIZER_ADDRESSES"])
print(pathlib.Path(os.environ["FAKE_SANITIZER_REPORT"]).read_text())
"""


class StubService(GpuService):
    worker_module = "tests.tools.gpu.stub_worker"


def module_of(language: str, source: str, kernel: str) -> CompiledModule:
    static = build(extract(GEMM, Arch.SM_90A, answer=elementwise_answer(language, source, kernel)), GEMM,
                   Arch.SM_90A, EvalOptions())  # fmt: skip
    assert static.module is not None, static.failed
    return static.module


@pytest.fixture
def sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Installs the stand-in compute-sanitizer; `report(name, lines, c_end)` sets the recorded report it prints,
    with its `FILE:OLD` lines replaced by `FILE:NEW`, and puts C's end at `c_end` (where the report's first
    faulting address lies). Returns it, and the path where the stand-in keeps the cubin it was handed."""
    script = tmp_path / "compute-sanitizer"
    script.write_text(f"#!{sys.executable}\n{FAKE_SANITIZER}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    cubin = tmp_path / "handed.cubin"
    monkeypatch.setenv("PTXBENCH_SANITIZER", str(script))
    monkeypatch.setenv("FAKE_SANITIZER_CUBIN", str(cubin))
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0.0]]))

    def report(name: str, lines: dict[str, str], c_end: int = 0) -> None:
        monkeypatch.setenv("FAKE_SANITIZER_ADDRESSES", json.dumps({"A": 0x7F0000000000, "C": c_end - C_BYTES}))
        text = (RECORDED / name).read_text()
        for old, new in lines.items():
            text = text.replace(old, new)
        path = tmp_path / name
        path.write_text(text)
        monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(path))

    return report, cubin


def fail(monkeypatch: pytest.MonkeyPatch, status: str, stage: str, message: str, **detail) -> None:
    failure = {"status": status, "stage": stage, "message": message, "detail": detail, "sticky": bool(detail)}
    monkeypatch.setenv("PTXBENCH_STUB_FAILURE", json.dumps(failure))


def evaluate(module: CompiledModule, **options):
    with StubService() as service:
        return service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False, **options))


def test_a_fault_in_a_ptx_answer_is_located_to_its_line_thread_and_tensor(sanitizer, monkeypatch) -> None:
    report, handed = sanitizer
    store = line_of(OOB_PTX, "st.global")
    report("memcheck_ptx_oob.txt", {"kernel.ptx:20": f"kernel.ptx:{store}"}, c_end=0x7F4464801000)
    fail(monkeypatch, "runtime_error", "run", "the kernel faulted: CUDA_ERROR_ILLEGAL_ADDRESS",
         fault="CUDA_ERROR_ILLEGAL_ADDRESS")  # fmt: skip
    outcome = evaluate(module_of("ptx", OOB_PTX, "oob_store"))
    assert outcome.status is Status.RUNTIME_ERROR
    memcheck = outcome.stages[-1]
    assert (memcheck.name, memcheck.state) == (Stage.MEMCHECK, StageState.FAILED)
    located = (
        f"Invalid __global__ write of size 4 bytes at line {store}: `st.global.b16 [%rd5], %h;` (oob_store+0x90), "
        "thread (0, 0, 0) of block (3, 0, 0): address 0x7f4464801000, 0 bytes past the end of C (bfloat16 "
        "[8192, 7168], 117,440,512 bytes) — the pointer this access is computed from"
    )
    assert f"\nLocated: {located}" in outcome.message
    assert f"- {located} (and 4 more threads at the same instruction)" in memcheck.message
    # What the sanitizer was handed: the diagnosis copy, whose line table puts the store on its PTX line.
    lines = subprocess.run([str(find_tool("nvdisasm").path), "-g", str(handed)], capture_output=True, text=True)
    table = lines.stdout.split("STG.E.U16")[0].rsplit("//##", 1)[-1]
    assert f'File "kernel.ptx", line {store}' in table


def test_the_same_fault_in_a_cuda_answer_is_located_to_its_cuda_line(sanitizer, monkeypatch) -> None:
    report, _ = sanitizer
    store = line_of(OOB_CUDA, "c[i + past]")
    report("memcheck_cuda_oob.txt", {"answer.cu:4": f"answer.cu:{store}"}, c_end=0x7F8392801000)
    fail(monkeypatch, "runtime_error", "run", "the kernel faulted", fault="CUDA_ERROR_ILLEGAL_ADDRESS")
    outcome = evaluate(module_of("cuda", OOB_CUDA, "oob_store"))
    assert f"at answer.cu line {store}: `c[i + past] = 0;`" in outcome.stages[-1].message
    assert "0 bytes past the end of C" in outcome.message


def test_a_mismatch_gets_racecheck_only_when_asked(sanitizer, monkeypatch) -> None:
    report, _ = sanitizer
    write, read = line_of(RACY_PTX, "st.shared"), line_of(RACY_PTX, "ld.shared")
    report("racecheck_shared.txt", {"kernel.ptx:16": f"kernel.ptx:{write}", "kernel.ptx:21": f"kernel.ptx:{read}"})
    fail(monkeypatch, "mismatch", "check", "C: MISMATCH — 58,720,000 elements never written")
    module = module_of("ptx", RACY_PTX, "racy")
    assert [s.name for s in evaluate(module).stages] == [Stage.CHECK]  # the stand-in reports the failed stage only
    outcome = evaluate(module, racecheck=True)
    racecheck = outcome.stages[-1]
    assert (outcome.status, racecheck.name, racecheck.state) == (Status.MISMATCH, Stage.RACECHECK, StageState.FAILED)
    assert (
        f"Write access at line {write}: `st.shared.b32 [%r5], %r2;` (race+0xb0) and Read access at line {read}: "
        "`ld.shared.b32 %r8, [%r7];` [256 hazards]"
    ) in racecheck.message


def test_no_sanitizer_runs_for_a_failure_that_is_not_a_fault(sanitizer, monkeypatch) -> None:
    fail(monkeypatch, "launch_error", "run", "launches[0] (oob_store) was refused")
    outcome = evaluate(module_of("ptx", OOB_PTX, "oob_store"))
    assert outcome.status is Status.LAUNCH_ERROR and [s.name for s in outcome.stages] == [Stage.RUN]


def test_without_a_sanitizer_the_fault_is_reported_as_it_was(monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_SANITIZER", "/nonexistent/compute-sanitizer")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0.0]]))
    fail(monkeypatch, "runtime_error", "run", "the kernel faulted", fault="CUDA_ERROR_ILLEGAL_ADDRESS")
    outcome = evaluate(module_of("ptx", OOB_PTX, "oob_store"))
    assert outcome.message == "the kernel faulted"
    assert outcome.stages[-1].state is StageState.SKIPPED and "not installed" in outcome.stages[-1].message
