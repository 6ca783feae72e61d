"""compute-sanitizer's reports, as recorded on the H200 (tests/fixtures/gpu/recorded/, CUDA 13.0), parsed
into findings: kind, kernel and SASS offset, the source line the cubin's line info names, thread and block,
address and the nearest allocation; host backtraces left out."""

from __future__ import annotations

from pathlib import Path

from tools.gpu.memcheck import parse_findings

RECORDED = Path(__file__).parents[2] / "fixtures" / "gpu" / "recorded"


def findings(name: str):
    return parse_findings((RECORDED / name).read_text())


def test_an_out_of_bounds_store_in_ptx_with_line_info() -> None:
    found = findings("memcheck_ptx_oob.txt")
    assert len(found) == 5  # --print-limit 5: the first five threads
    first = found[0]
    assert first.kind == "Invalid __global__ write of size 4 bytes" and first.access_bytes == 4
    assert (first.kernel, first.offset, first.file, first.line) == ("oob_store", "0x90", "kernel.ptx", 20)
    assert (first.thread, first.block) == ([0, 0, 0], [3, 0, 0])
    assert first.address == "0x7f4464801000"
    assert first.nearest == {"bytes": 1, "side": "after", "base": "0x7f4464800000", "size": 4096}
    assert [f.thread[0] for f in found] == [0, 1, 2, 3, 4]
    assert "Host Frame" not in first.line_text() and "(kernel.ptx:20)" in first.line_text()


def test_the_same_fault_in_a_cuda_answer_names_the_cuda_line() -> None:
    first = findings("memcheck_cuda_oob.txt")[0]
    assert (first.file, first.line, first.kernel) == ("answer.cu", 4, "oob_store")


def test_a_shared_memory_race() -> None:
    [race] = findings("racecheck_shared.txt")
    assert race.kind.startswith("Error: Race reported between Write access")
    assert (race.kernel, race.offset, race.file, race.line) == ("race", "0xb0", "kernel.ptx", 16)
    assert race.other == {"access": "Read", "offset": "0xc0", "line": 21}


def test_a_clean_report_has_no_findings() -> None:
    assert parse_findings("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []
