"""Locating a hang (tools/gpu/hang.py) without a GPU: cuda-gdb's listing of a hung process — in the format its
manual gives for `info cuda kernels`, `info cuda threads`, `x/1i $pc` and `info address`, at the PCs the real ptxas
gives the mbarrier-hang kernel — parsed, mapped through the real diagnosis copy's line table to the answer's PTX
lines and grouped into warps per block; a wait loop told as its mbarrier wait with its barrier and parity. Through
the real GpuService and a stand-in worker that hangs, a stand-in cuda-gdb (a script printing the same listing, once
it finds the worker alive under the pid it was given) shows that the service attaches before it kills, and that
the location reaches the time-out's message while the verdict stays a time-out; where cuda-gdb is missing or may
not attach, the message says so."""

from __future__ import annotations

import json
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import MBARRIER_HANG_PTX, line_of, mbarrier_hang_answer
from tools import procs
from tools.evaluation import Stage, Status
from tools.gpu import hang
from tools.gpu.base import CompiledModule
from tools.gpu.service import GpuService
from tools.lineinfo import line_table
from tools.options import EvalOptions
from tools.pipeline import build, extract

GEMM = get_task("gemm")
START = 0x7FFFD7276400  # where cuda-gdb would say the kernel's code starts
WAIT_LINE = line_of(MBARRIER_HANG_PTX, "mbarrier.try_wait")
BRANCH_LINE = line_of(MBARRIER_HANG_PTX, "bra WAIT")
BARRIER_LINE = line_of(MBARRIER_HANG_PTX, "bar.sync")


@pytest.fixture(scope="module")
def module() -> CompiledModule:
    """The hang answer built as the pipeline builds it (real ptxas; its static checks pass)."""
    static = build(extract(GEMM, Arch.SM_90A, answer=mbarrier_hang_answer()), GEMM, Arch.SM_90A, EvalOptions())
    assert static.module is not None, [s.message for s in static.stages]
    return static.module


@pytest.fixture(scope="module")
def offsets(module: CompiledModule) -> dict[int, int]:
    """PTX line → the first SASS offset the real line table gives it."""
    table = line_table("ptx", module.ptx, module.cubin, Arch.SM_90A, procs.Budget(60))
    assert table.lines, table.note
    found: dict[int, int] = {}
    for offset, (_, line) in sorted(table.lines["hang_on_mbarrier"].items()):
        found.setdefault(line, offset)
    return found


def listing(rows: list[tuple[str, str, str, str, int, int]]) -> str:
    """cuda-gdb's batch output for thread ranges (first block, first thread, last block, last thread, count, SASS
    offset), in its manual's formats; the focused thread is the first row's."""
    threads = "\n".join(
        f"{'*' if i == 0 else ' '}  {b0:>9} {t0:>9} {b1:>11} {t1:>11} {n:>5} {START + off:#018x}       n/a     0"
        for i, (b0, t0, b1, t1, n, off) in enumerate(rows)
    )
    return textwrap.dedent("""\
        [Thread debugging using libthread_db enabled]
        [Switching focus to CUDA kernel 0, grid 1, block (0,0,0), thread (0,0,0), device 0, sm 0, warp 0, lane 0]
        {focus:#x} in hang_on_mbarrier<<<(2,1,1),(128,1,1)>>> ()
          Kernel Parent Dev Grid Status   SMs Mask   GridDim  BlockDim Invocation
        *      0      -   0    1 Active 0x00000003   (2,1,1) (128,1,1) hang_on_mbarrier(c=0x7fffb2000000, n=58720256)
          BlockIdx ThreadIdx To BlockIdx To ThreadIdx Count                 PC  Filename  Line
        Kernel 0
        {threads}
        => {focus:#x} <hang_on_mbarrier+{offset}>:\tSYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR9], R0
        Symbol "hang_on_mbarrier" is at {start:#x} in a file compiled without debugging.
        [Inferior 1 (process 4242) detached]
        """).format(focus=START + rows[0][5], offset=rows[0][5], threads=threads, start=START)


def every_warp_waiting(offsets: dict[int, int]) -> str:
    wait, branch = offsets[WAIT_LINE], offsets[BRANCH_LINE]
    return listing([("(0,0,0)", "(0,0,0)", "(0,0,0)", "(63,0,0)", 64, wait),
                    ("(0,0,0)", "(64,0,0)", "(0,0,0)", "(127,0,0)", 64, branch),
                    ("(1,0,0)", "(0,0,0)", "(1,0,0)", "(127,0,0)", 128, wait)])  # fmt: skip


def test_the_listing_parses_into_threads_kernels_and_start(offsets) -> None:
    parsed = hang.parse_listing(every_warp_waiting(offsets))
    assert [(t.first_block, t.first_thread, t.last_thread, t.count) for t in parsed.threads] == [
        ((0, 0, 0), (0, 0, 0), (63, 0, 0), 64), ((0, 0, 0), (64, 0, 0), (127, 0, 0), 64),
        ((1, 0, 0), (0, 0, 0), (127, 0, 0), 128),
    ]  # fmt: skip
    assert all(t.kernel_id == 0 and t.line is None for t in parsed.threads)  # "n/a 0": no line information
    assert parsed.threads[0].pc == START + offsets[WAIT_LINE]
    kernel = parsed.kernels[0]
    assert (kernel.name, kernel.grid, kernel.block) == ("hang_on_mbarrier", (2, 1, 1), (128, 1, 1))
    assert parsed.starts == {"hang_on_mbarrier": START}


def test_the_wait_loop_is_one_group_naming_the_wait_its_barrier_and_the_warps(module, offsets) -> None:
    snap = hang.Snapshot(output=every_warp_waiting(offsets), seconds=0.9)
    report = hang.locate(snap, module, Arch.SM_90A, procs.Budget(60))
    assert len(report.groups) == 1, report.groups  # the branch back to the wait is the wait
    g = report.groups[0]
    assert (g.file, g.line, g.threads) == ("kernel.ptx", WAIT_LINE, 256)
    assert g.pieces == ["block (0,0,0): warps 0–3", "block (1,0,0): warps 0–3"]
    assert g.wait == "mbarrier wait on `full_bar` (through %r2), for phase parity 0"
    text = report.text()
    assert f"block (0,0,0): warps 0–3; block (1,0,0): warps 0–3 wait at line {WAIT_LINE} `mbarrier.try_wait" in text


def test_warps_on_different_lines_are_told_apart(module, offsets) -> None:
    rows = [("(0,0,0)", "(0,0,0)", "(0,0,0)", "(63,0,0)", 64, offsets[WAIT_LINE]),
            ("(0,0,0)", "(64,0,0)", "(0,0,0)", "(127,0,0)", 64, offsets[BARRIER_LINE]),
            ("(1,0,0)", "(0,0,0)", "(1,0,0)", "(127,0,0)", 128, offsets[WAIT_LINE])]  # fmt: skip
    report = hang.locate(hang.Snapshot(output=listing(rows)), module, Arch.SM_90A, procs.Budget(60))
    assert [(g.line, g.pieces) for g in report.groups] == [
        (WAIT_LINE, ["block (0,0,0): warps 0–1", "block (1,0,0): warps 0–3"]),
        (BARRIER_LINE, ["block (0,0,0): warps 2–3"]),
    ]
    assert report.groups[1].wait is None and report.groups[1].quoted == "bar.sync 0;"


def test_a_range_over_a_few_blocks_is_told_per_block_and_over_many_as_one_span(module, offsets) -> None:
    rows = [("(0,0,0)", "(0,0,0)", "(0,0,0)", "(31,0,0)", 32, offsets[WAIT_LINE]),
            ("(0,0,0)", "(32,0,0)", "(1,0,0)", "(63,0,0)", 160, offsets[BRANCH_LINE]),
            ("(1,0,0)", "(64,0,0)", "(1,0,0)", "(127,0,0)", 64, offsets[WAIT_LINE])]  # fmt: skip
    report = hang.locate(hang.Snapshot(output=listing(rows)), module, Arch.SM_90A, procs.Budget(60))
    assert report.groups[0].pieces == ["block (0,0,0): warps 0–3", "block (1,0,0): warps 0–3"]
    many = listing([("(0,0,0)", "(0,0,0)", "(999,0,0)", "(127,0,0)", 128_000, offsets[WAIT_LINE])])
    many = many.replace("   (2,1,1) (128,1,1)", "(1000,1,1) (128,1,1)")  # the kernel as launched on 1000 blocks
    report = hang.locate(hang.Snapshot(output=many), module, Arch.SM_90A, procs.Budget(60))
    assert report.groups[0].pieces == ["blocks (0,0,0)–(999,0,0): every warp (0–3)"]


def test_a_pc_with_no_start_address_is_told_by_its_pc(module, offsets) -> None:
    text = "\n".join(line for line in every_warp_waiting(offsets).splitlines() if not line.startswith(("Symbol", "=>")))
    report = hang.locate(hang.Snapshot(output=text), module, Arch.SM_90A, procs.Budget(60))
    assert report.groups and all(g.line is None for g in report.groups)
    assert f"PC {START + offsets[WAIT_LINE]:#x} (the kernel's start address is unknown)" in report.text()
    assert "3 thread range(s) have no source line" in report.note


def test_a_skipped_snapshot_says_why() -> None:
    report = hang.locate(hang.Snapshot(skipped="cuda-gdb is not installed here"), None, Arch.SM_90A, procs.Budget(1))
    assert report.text() == "Where the warps wait: not located (cuda-gdb is not installed here)."


def describe(statement: str, before: str = "") -> str | None:
    lines = [*before.splitlines(), statement]
    return hang.describe_wait(lines, len(lines))


def test_a_wait_names_its_barrier_and_phase_as_the_ptx_does() -> None:
    assert describe("mbarrier.try_wait.parity.shared::cta.b64 %p1, [bars+8], %r9;") == (
        "mbarrier wait on `bars+8`, for the phase parity in %r9"
    )
    assert describe("mbarrier.test_wait.shared.b64 %p1, [%rd4], %rd7;", "cvta.shared.u64 %rd4, empty_bar;") == (
        "mbarrier wait on `empty_bar` (through %rd4), for the phase token in %rd7"
    )
    assert describe("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r5], 1;", "add.s32 %r5, %r4, 16;") == (
        "mbarrier wait on the address in %r5, for phase parity 1"
    )
    assert describe("bar.sync 0;") is None


STAND_IN = """\
import sys
pid = sys.argv[sys.argv.index("-p") + 1]
try:
    alive = "stub_worker" in open(f"/proc/{pid}/cmdline").read()
except OSError:
    alive = False
sys.stdout.write(open(LISTING).read() if alive else f"ptrace: No such process {pid}.\\n")
"""


def stand_in(tmp_path: Path, text: str) -> Path:
    (tmp_path / "listing.txt").write_text(text)
    script = tmp_path / "cuda-gdb"
    body = STAND_IN.replace("LISTING", repr(str(tmp_path / "listing.txt")))
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def hanging_service(monkeypatch: pytest.MonkeyPatch):
    class StubService(GpuService):
        worker_module = "tests.tools.gpu.stub_worker"

    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0.0], ["check", None, 60.0]]))
    with StubService() as service:
        yield service


def test_a_time_out_is_located_before_the_worker_is_killed(hanging_service, module, offsets, tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CUDA_GDB", str(stand_in(tmp_path, every_warp_waiting(offsets))))
    outcome = hanging_service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False, timeout_s=1))
    assert outcome.status is Status.TIMEOUT  # the verdict is the time-out's
    stage = outcome.stages[-1]
    assert stage.name is Stage.CHECK and stage.message.startswith("no result within 1 s during the check stage")
    assert f"warps 0–3 wait at line {WAIT_LINE} `mbarrier.try_wait" in stage.message
    assert stage.detail["hang"]["groups"][0]["line"] == WAIT_LINE
    assert hanging_service.restarts == 1


def test_where_cuda_gdb_may_not_attach_or_is_missing_the_message_says_so(hanging_service, module, tmp_path,
                                                                         monkeypatch) -> None:  # fmt: skip
    script = tmp_path / "cuda-gdb"
    script.write_text(f"#!{sys.executable}\nprint('ptrace: Operation not permitted.')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PTXBENCH_CUDA_GDB", str(script))
    options = EvalOptions(profile=False, timeout_s=1)
    outcome = hanging_service.evaluate(GEMM, Arch.SM_90A, module, options)
    assert outcome.status is Status.TIMEOUT
    assert outcome.stages[-1].message.endswith(
        "Where the warps wait: not located (cuda-gdb may not attach here (ptrace: operation not permitted))."
    )
    monkeypatch.setenv("PTXBENCH_CUDA_GDB", str(tmp_path / "absent"))
    if hang.find_cuda_gdb() is not None:
        pytest.skip("this machine has a cuda-gdb where the search looks")
    outcome = hanging_service.evaluate(GEMM, Arch.SM_90A, module, options)
    assert outcome.stages[-1].message.endswith("Where the warps wait: not located (cuda-gdb is not installed here).")
