"""The diagnosis copy: every statement of a PTX answer tagged with its own line, whatever `.file`/`.loc` lines and
DWARF sections the module carried dropped, assembled by the real ptxas with -lineinfo; the real nvdisasm reads
back a line table that names the answer's lines."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tasks.schema import Arch
from tests.gpu.kernels import OOB_PTX, line_of
from tools.lineinfo import diagnosis_copy, tag_lines
from tools.toolchain import find_tool

PTX = Path(__file__).parents[1] / "fixtures" / "ptx"
_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')


def line_table(cubin: bytes, tmp_path: Path) -> list[tuple[str, int, str]]:
    """(file, line, SASS instruction) for every instruction nvdisasm annotates."""
    path = tmp_path / "copy.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(find_tool("nvdisasm").path), "-g", str(path)], capture_output=True, text=True).stdout
    rows, where = [], None
    for line in out.splitlines():
        if m := _LINE.search(line):
            where = (m.group(1), int(m.group(2)))
        elif where and (m := re.search(r"/\*[0-9a-f]{4}\*/\s+(.*?);", line)):
            rows.append((*where, m.group(1)))
    return rows


def test_each_statement_carries_its_own_line(tmp_path: Path) -> None:
    copy = diagnosis_copy("ptx", OOB_PTX, Arch.SM_90A, 60)
    assert copy.cubin is not None, copy.note
    table = line_table(copy.cubin, tmp_path)
    stores = [(file, line) for file, line, sass in table if sass.startswith("STG")]
    assert stores == [("kernel.ptx", line_of(OOB_PTX, "st.global"))]
    assert {file for file, _, _ in table} == {"kernel.ptx"}


def test_multi_line_statements_and_labels_are_tagged_once() -> None:
    source = "\n".join([
        ".version 8.0", ".target sm_90a", ".address_size 64", ".visible .entry k()", "{",
        "    .reg .b32 %r<3>;", "L0: mov.u32 %r1,", "        %r2;", "DONE:", "    ret;", "}",
    ])  # fmt: skip
    tagged = tag_lines(source).splitlines()
    assert tagged[tagged.index("L0: mov.u32 %r1,") - 1] == "\t.loc\t1 7 0"
    assert tagged[tagged.index("        %r2;") - 1] == "L0: mov.u32 %r1,"  # a continuation is not a statement
    assert tagged[tagged.index("    ret;") - 1] == "\t.loc\t1 10 0"
    assert tagged[-1] == '\t.file\t1 "kernel.ptx"' and sum(".loc" in t for t in tagged) == 2


@pytest.mark.parametrize(("name", "arch"), [("triton_gemm_sm_90a.ptx", Arch.SM_90A),
                                            ("triton_gemm_sm_100a.ptx", Arch.SM_100A)])  # fmt: skip
def test_a_module_with_its_own_line_info_gets_the_answers_lines_instead(name: str, arch: Arch, tmp_path) -> None:
    source = (PTX / name).read_text()
    assert ".loc\t1 " in source and ".section\t.debug_info" in source  # Triton's own, naming its Python files
    copy = diagnosis_copy("ptx", source, arch, 60)
    assert copy.cubin is not None, copy.note
    table = line_table(copy.cubin, tmp_path)
    lines = source.splitlines()
    assert {file for file, _, _ in table} == {"kernel.ptx"}
    # Every line the table names is a statement of the answer (ptxas may give a wgmma's SASS its neighbour's line).
    assert all(re.match(r"^\s*(@|[a-z])", lines[n - 1]) for _, n, _ in table)
    assert any("wgmma.mma_async" in lines[n - 1] or "tcgen05.mma" in lines[n - 1] for _, n, _ in table)


def test_a_copy_that_does_not_assemble_says_why() -> None:
    copy = diagnosis_copy("ptx", ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { mvo; }\n",
                          Arch.SM_90A, 60)  # fmt: skip
    assert copy.cubin is None and copy.note.startswith("the copy with line information did not assemble (line 4")
