"""CUDA C++ → PTX through the real NVRTC → cubin through ptxas: diagnostics point at the user's lines (also
for ptxas errors in inline PTX), and only the headers NVRTC ships may be included, whatever the spelling."""

from __future__ import annotations

import pytest

from tasks.schema import Arch
from tools import nvrtc, procs
from tools.assemble import compile_cuda
from tools.ptx import bodies, entries

WGMMA_CUDA = """\
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(128) scale(__nv_bfloat16* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
"""
TCGEN05_CUDA = """\
#include <cuda_fp16.h>

extern "C" __global__ void fence(int* flag) {
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    flag[threadIdx.x] = 1;
}
"""
BAD_INLINE_PTX = """\
#include <cuda_bf16.h>

extern "C" __global__ void k(int* x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i] = 1;
    asm volatile("mvo.u32 %0, %0;" : "+r"(n));
    x[0] = n;
}
"""
UNDEFINED_NAME = """\
extern "C" __global__ void k(int* x) {
    x[0] = 1;

    x[1] = not_declared;
}
"""


@pytest.fixture(scope="module")
def wgmma_cuda():
    return compile_cuda(WGMMA_CUDA, Arch.SM_90A)


def test_cuda_with_inline_wgmma_compiles_for_sm_90a(wgmma_cuda):
    assert wgmma_cuda.ok, wgmma_cuda.message()
    assert wgmma_cuda.language == "cuda"
    assert ".target sm_90a" in wgmma_cuda.ptx and "wgmma.fence.sync.aligned;" in wgmma_cuda.ptx
    assert wgmma_cuda.toolchain["nvrtc"] == "13.0" and "ptxas" in wgmma_cuda.toolchain
    assert [k.name for k in wgmma_cuda.kernels] == ["scale"]
    entry = entries(wgmma_cuda.ptx)["scale"]
    assert [p.type for p in entry.params] == [".u64", ".f32", ".u32"]
    assert entry.maxntid == [128, 1, 1]


def test_every_statement_of_nvrtcs_ptx_is_read_past_its_line_directives(wgmma_cuda):
    """NVRTC writes a `.loc` line, with no semicolon, before most statements: each must stay its own statement."""
    (body,) = bodies(wgmma_cuda.ptx).values()
    lines = [text.strip() for text in wgmma_cuda.ptx.splitlines()]
    entry = next(n for n, text in enumerate(lines, start=1) if ".entry" in text)
    assert any(text.startswith(".loc") for text in lines[entry:])
    statements = [n for n, text in enumerate(lines, start=1) if n > entry and text.endswith(";")
                  and not text.startswith((".loc", ".file", ".reg", "//"))]  # fmt: skip
    read = {s.line for s in body if s.opcode}
    assert [n for n in statements if n not in read] == []
    assert any(s.opcode.startswith("ld.param") for s in body)
    assert not any(s.opcode.startswith(".loc") or ".loc" in " ".join(s.operands) for s in body)


def test_cuda_with_inline_tcgen05_compiles_for_sm_100a():
    result = compile_cuda(TCGEN05_CUDA, Arch.SM_100A)
    assert result.ok, result.message()
    assert ".target sm_100a" in result.ptx and "tcgen05.fence::before_thread_sync;" in result.ptx


def test_nvrtc_error_points_at_the_users_line():
    result = compile_cuda(UNDEFINED_NAME, Arch.SM_90A)
    assert not result.ok and "ptxas" not in result.toolchain
    [error] = result.errors
    assert error.line == 4
    assert error.message == 'identifier "not_declared" is undefined'
    assert error.source_line == "x[1] = not_declared;"


def test_ptxas_error_in_inline_asm_is_mapped_back_to_the_cuda_line():
    result = compile_cuda(BAD_INLINE_PTX, Arch.SM_90A)
    assert not result.ok
    assert result.errors, result.log
    for error in result.errors:
        assert error.line == 6
        assert error.source_line == 'asm volatile("mvo.u32 %0, %0;" : "+r"(n));'
        assert error.ptx_line is not None and "mvo.u32" in result.ptx.splitlines()[error.ptx_line - 1]
        assert f"(generated PTX line {error.ptx_line}: `mvo.u32" in error.message
    assert any("Not a name of any known instruction: 'mvo'" in e.message for e in result.errors)


UNFENCED_WGMMA_CUDA = """\
extern "C" __global__ void __launch_bounds__(128, 1) pv(const unsigned* p, float* out, unsigned long long desc) {
    float acc[4] = {};
    unsigned a[4];
    for (int i = 0; i < 4; ++i) a[i] = p[threadIdx.x * 4 + i];
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, %8, 1, 1, 1, 1;"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = acc[i];
}
"""


def test_a_ptxas_info_line_on_inline_ptx_lands_on_the_cuda_line():
    """A wgmma with no wgmma.fence before it: ptxas's C7519 names a line of NVRTC's PTX, and the diagnostic
    quotes both that line and the user's asm statement, attributed to the kernel, with its usual cause."""
    result = compile_cuda(UNFENCED_WGMMA_CUDA, Arch.SM_90A)
    assert result.ok, result.message()
    [info] = result.diagnostics
    assert (info.severity, info.kernel, info.line) == ("info", "pv", 8)
    assert info.message.startswith("(C7519) warpgroup.arrive is injected in around line ")
    assert "wgmma.mma_async" in result.ptx.splitlines()[info.ptx_line - 1]
    assert info.source_line.startswith(': "r"(a[0])') and info.performance


@pytest.mark.parametrize(
    ("source", "line", "message"),
    [
        ("#include <stdio.h>\n", 1, "#include <stdio.h> is refused: only the headers NVRTC ships may be included"),
        ('\n#include "../../../etc/passwd"\n', 2, '#include "../../../etc/passwd" is refused'),
        ("#include <cuda_bf16.h/../../../../../../etc/passwd>\n", 1, "is refused"),
        ("#include </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ('#include "/etc/passwd"\n', 1, '#include "/etc/passwd" is refused'),
        ("#define H </etc/passwd>\n#include H\n", 2, '#include must name a header literally (<name> or "name")'),
        ("#define H(x) #x\n#include H(/etc/passwd)\n", 2, "#include must name a header literally"),
        ("int a;\n#inc\\\nlude </etc/passwd>\n", 2, "#include </etc/passwd> is refused"),
        ("#\\\ninclude \\\n</etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("#inc\\\r\nlude </etc/passwd>\r\n", 1, "#include </etc/passwd> is refused"),
        ("%:include </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("  #  include_next </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("#/* a comment */include </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("/* a comment */ # include </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("int a; /* a\ncomment */ #include </etc/passwd>\n", 2, "#include </etc/passwd> is refused"),
        ('const char* s = "/*";\n#/**/include </etc/passwd>\n// */\n', 2, "#include </etc/passwd> is refused"),
        ("int a = 1'0\"'/*\";\n#/**/include </etc/passwd>\n// */\n", 2, "#include </etc/passwd> is refused"),
        ('"unclosed /*\n#/**/include </etc/passwd>\n*/\n', 2, "#include </etc/passwd> is refused"),
        ("\ufeff#include </etc/passwd>\n", 1, "#include </etc/passwd> is refused"),
        ("#include /*\n*/ </etc/passwd>\n", 1, "#include must name a header literally"),
        ('auto s = R"x(a)\\\nx" /* )x";\n#/**/include </etc/passwd>\n// */\n', 1, "a raw string literal"),
        ('auto s = R"(unterminated\n#include <cuda_bf16.h>\n', 1, "a raw string literal"),
        ("#include <cuda_bf16.h\n", 1, "#include must name a header literally"),
        ("#include <a\0b>\n", 1, "is refused"),
        ("#include <crt>\n", 1, "#include <crt> is refused"),  # a folder, not a header
    ],
)
def test_includes_other_than_shipped_headers_are_refused(source, line, message):
    with pytest.raises(nvrtc.IncludeRefused) as refused:
        nvrtc.check_includes(source)
    assert refused.value.line == line
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "source",
    [
        "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda_fp8.h>\n#include <cuda_pipeline.h>\n",
        '#include "cuda_bf16.h" // bf16\n',
        "#include <crt/host_defines.h>\n",
        'const char* s = "#include <stdio.h>";  // not a directive\n',
        "// #include <stdio.h> would be refused, but this is a comment\n/* and so is\n#include <stdio.h>\n*/\n",
        'asm volatile(R"(\n  wgmma.fence.sync.aligned; /* not a comment opener */\n)");\n#include <cuda_bf16.h>\n',
        "int big = 1'000'000; char q = '\"'; const char* s = \"\\\"/*\";\n#include <cuda_fp16.h>\n",
    ],
)
def test_shipped_headers_and_lookalikes_are_allowed(source):
    assert nvrtc.check_includes(source) is None  # no IncludeRefused


def test_refused_include_becomes_a_diagnostic_on_its_line():
    source = "// kernel\n#include <cuda_bf16.h>\n#include <vector>\n" + UNDEFINED_NAME
    result = compile_cuda(source, Arch.SM_90A)
    assert not result.ok and "nvrtc" not in result.toolchain  # refused before NVRTC runs
    [error] = result.diagnostics
    assert (error.line, error.source_line) == (3, "#include <vector>")
    assert "#include <vector> is refused" in error.message


def test_nvrtc_time_out_is_a_message():
    ptx, log = nvrtc.lower_to_ptx(WGMMA_CUDA, "sm_90a", procs.Budget(0.001))
    assert ptx is None
    assert log.startswith("NVRTC did not finish within the 0.001 s limit of the static stages")


def test_nul_bytes_are_refused_not_truncated():
    # NVRTC reads a C string: it would compile the kernel before the NUL and never see the rest.
    result = compile_cuda(UNDEFINED_NAME.replace("x[1] = not_declared;", "x[1] = 2;") + "\0 not C++", Arch.SM_90A)
    assert not result.ok
    assert result.message() == "module: error: the source holds NUL bytes: it is not CUDA text"


def test_cuda_size_cap():
    result = compile_cuda("//" + "x" * (16 << 20), Arch.SM_90A)
    assert result.message() == "module: error: the source is over the 16 MB cap"
