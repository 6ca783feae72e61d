"""`python -m tools.dev.probe_h200 [--out DIR] [--only NAMES] [--budget-s S]`: one run on the lent H200 that answers
what issues 27, 28, 29 and 32 need to know before they are built. Six probes, each a question (its docstring says
which), each in its own child process under its own time limit, in this order:

- ptxas_codes (28): the exact info lines ptxas prints for kernels made to serialize wgmma or spill;
- cupti_counts (32): executed HGMMA and UTMALDG counts of one reference-GEMM launch through each CUPTI route,
  beside Nsight Compute's, and what each route costs per launch;
- cupti_durations (29): the GEMM's duration by CUPTI activity records against CUDA events;
- ncu_source (28): Nsight Compute's per-instruction and per-line values for a bank-conflicting store;
- fp8_baselines (27): torch._scaled_mm with block scales and cudnn-frontend's fp8 SDPA: what runs, how fast,
  how close to fp32; whether DeepGEMM imports;
- hang_located (28): where the warps of a kernel hung on an mbarrier wait are, by cuda-gdb attached and by a
  user-triggered GPU core dump.

A probe writes DIR/<probe>.json after each of its steps (a failing step is recorded and the next runs; a probe
stopped at its limit keeps the steps it finished). Whole tool outputs, for writing parsers on CPU, go to
DIR/raw/ and are packed into DIR/raw.tar.gz at the end, so that at most 8 files come back. DIR/summary.json
holds the machine's facts and each probe's status and answer; a table is printed last. DIR: --out, else $OUT,
else the current folder. The wheels it needs beyond the project's: tools/dev/probe_h200.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tools import procs
from tools.gpu import cupti_counts
from tools.gpu.cupti_counts import (
    API_RANGE_PROFILING,
    AUTO_RANGE,
    COUNTER_METRIC,
    RANGE_PROFILER_TYPE,
    USER_REPLAY,
    CuptiError,
    GetCounterAvailability,
    HostDeinitialize,
    HostEvaluate,
    HostGetBaseMetrics,
    HostGetMetricProperties,
    HostInitialize,
    ProfilerInitialize,
    RangeCounterDataInitialize,
    RangeDecode,
    RangeDisable,
    RangeEnable,
    RangeGetCounterDataInfo,
    RangeGetCounterDataSize,
    RangeSetConfig,
    RangeStart,
    RangeStop,
    library_candidates,
    names_array,
    params,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
GEMM_TASK = "gemm_n7168_k5120"
GEMM_KERNEL = "gemm_persistent_kernel"
EXCERPT_CHARS = 3000  # of a tool's output in a probe's JSON; the whole output goes to raw/
RAW_CHARS = 4 << 20  # of one raw file
RAW = "raw"
FINISH_S = 15.0  # kept back from the budget for the summary and the packing
CUPTI_MAX_PASSES = 16


class ProbeError(RuntimeError):
    """A step that could not do what it set out to; the message says what happened instead."""


# ------------------------------------------------------------------------------------------ recording


def excerpt(text: str, chars: int = EXCERPT_CHARS) -> str:
    """Head and tail of `text`, at most about `chars` characters."""
    text = text or ""
    if len(text) <= chars:
        return text
    half = chars // 2
    return f"{text[:half]}\n… [{len(text) - chars:,} characters left out] …\n{text[-half:]}"


class Record:
    """One probe's JSON file, rewritten after every step, so that a probe stopped at its limit keeps what it
    finished. A step that raises is recorded with its error and the probe goes on."""

    def __init__(self, out: Path, probe: str, question: str):
        self.out = out
        self.path = out / f"{probe}.json"
        self.probe = probe
        self.data: dict[str, Any] = {
            "probe": probe,
            "question": question,
            "status": "running",
            "answer": "",
            "steps": {},
        }
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {"ok": False}
        self.data["steps"][name] = entry
        self.save()
        start = time.perf_counter()
        try:
            yield entry
            entry["ok"] = True
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"[:2000]
            if not isinstance(e, ProbeError):
                entry["traceback"] = traceback.format_exc()[-2000:]
        finally:
            entry["seconds"] = round(time.perf_counter() - start, 3)
            self.save()

    def raw(self, name: str, text: str) -> str:
        """Keep a tool's whole output as raw/<probe>.<name>; returns that name."""
        folder = self.out / RAW
        folder.mkdir(exist_ok=True)
        file = f"{self.probe}.{name}"
        (folder / file).write_text(text[:RAW_CHARS])
        return file

    def finish(self, answer: str) -> None:
        steps = self.data["steps"].values()
        ok = [s["ok"] for s in steps]
        self.data["status"] = "ok" if ok and all(ok) else "partial" if any(ok) else "error"
        self.data["answer"] = answer
        self.save()


def tool(cmd: list[str], timeout_s: float, **kwargs: Any) -> dict[str, Any]:
    """Run a command under a time limit; its exit status, seconds and output (whole, under 'stdout'/'stderr'),
    or why it did not run. Never raises."""
    start = time.perf_counter()
    result: dict[str, Any] = {"cmd": shlex.join(str(c) for c in cmd)}
    try:
        done = procs.run([str(c) for c in cmd], timeout_s, **kwargs)
        result.update(rc=done.returncode, stdout=done.stdout, stderr=done.stderr)
    except subprocess.TimeoutExpired:
        result.update(rc=None, timed_out=True, stdout="", stderr=f"did not finish within {timeout_s:.0f} s")
    except OSError as e:
        result.update(rc=None, stdout="", stderr=f"could not start: {e}")
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def brief(result: dict[str, Any]) -> dict[str, Any]:
    """A tool() result with its output cut to excerpts, for a probe's JSON."""
    return {k: excerpt(v) if k in ("stdout", "stderr") else v for k, v in result.items()}


def loaded_libraries(pattern: str) -> list[str]:
    """Paths of the shared libraries this process has mapped whose name contains `pattern`."""
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/maps").read_text().splitlines()
        return sorted({line.split()[-1] for line in lines if pattern in line.split()[-1]})
    return []


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the repository on PYTHONPATH (children run `-m tools.…` from any folder)."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


# -------------------------------------------------------------------------------------------- kernels

# Thread 0 tells the mbarrier to expect 1024 bytes, but its bulk copy brings 512: the phase never completes
# and every thread spins in the try_wait loop (the wrong expect_tx count of issue 28).
HANG_KERNEL = "hang_on_mbarrier"
HANG_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry hang_on_mbarrier(
	.param .u64 hang_on_mbarrier_param_0
)
.reqntid 128
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	.shared .align 8 .b64 bar;
	.shared .align 128 .b8 tile[512];

	ld.param.u64 	%rd1, [hang_on_mbarrier_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, bar;
	mov.u32 	%r3, tile;
	setp.eq.u32 	%p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 	[%r2], 1;
	fence.mbarrier_init.release.cluster;
	bar.sync 	0;
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 	%rd3, [%r2], 1024;
	@%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes 	[%r3], [%rd2], 512, [%r2];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 	%p2, [%r2], 0;
	@!%p2 bra 	$L_wait;
	ret;
}
"""

# Each warp's 32 lanes store to words 128 bytes apart, all in one bank: a 32-way conflict on every store of
# the first st.volatile (volatile, so ptxas keeps every iteration's store). The second is conflict-free.
BANK_KERNEL = "bank_conflicts"
BANK_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry bank_conflicts(
	.param .u64 bank_conflicts_param_0
)
.reqntid 256
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<4>;
	.shared .align 16 .b32 tile[2048];

	ld.param.u64 	%rd1, [bank_conflicts_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	and.b32 	%r2, %r1, 31;
	shr.u32 	%r3, %r1, 5;
	mov.u32 	%r4, tile;
	shl.b32 	%r5, %r2, 7;
	shl.b32 	%r6, %r3, 2;
	add.s32 	%r7, %r5, %r6;
	add.s32 	%r7, %r4, %r7;
	shl.b32 	%r8, %r1, 2;
	add.s32 	%r8, %r4, %r8;
	mov.u32 	%r9, 0;
$L_loop:
	st.volatile.shared.u32 	[%r7], %r9;
	st.volatile.shared.u32 	[%r8+4096], %r9;
	add.s32 	%r9, %r9, 1;
	setp.lt.u32 	%p1, %r9, 4096;
	@%p1 bra 	$L_loop;
	bar.sync 	0;
	ld.volatile.shared.u32 	%r10, [%r7];
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd3, %rd2, %rd3;
	st.global.u32 	[%rd3], %r10;
	ret;
}
"""

_IN_FLIGHT_OPS = {
    "define": "\tadd.f32 \t%f1, %f1, 0f3F800000;",  # a non-wgmma instruction writes an accumulator
    "read": "\tst.global.f32 \t[%rd6], %f1;",  # … reads one
    "call": "\tcall \thelper;",
    "indirect_call": "\tmov.u64 \t%rd7, helper;\n\tcall \t%rd7, helper_type;",  # ptxas cannot inline it
}
_HELPER = ".func helper()\n{\n\tret;\n}\n\n"
_EXTERN_HELPER = ".extern .func helper();\n\n"
_WGMMA_ENTRY = """.visible .entry {name}(
	.param .u64 out,
	.param .u64 desc_a,
	.param .u64 desc_b
)
.reqntid 128
{maxnreg}{{
	.reg .f32 	%f<{registers}>;
	.reg .b64 	%rd<8>;
	.reg .b32 	%r<4>;
	.reg .pred 	%p<2>;
	helper_type: .callprototype _ ();
	ld.param.u64 	%rd1, [out];
	ld.param.u64 	%rd2, [desc_a];
	ld.param.u64 	%rd3, [desc_b];
	cvta.to.global.u64 	%rd4, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd5, %r1, 4;
	add.s64 	%rd6, %rd4, %rd5;
	mov.u32 	%r2, 0;
"""
_LOOP_END = (
    "\twgmma.wait_group.sync.aligned 1;\n\tadd.u32 \t%r2, %r2, 1;\n\tsetp.lt.u32 \t%p1, %r2, 8;\n\t@%p1 bra \t$L_loop;"
)


def wgmma_kernel(name: str, *, n: int = 64, sets: int = 1, maxnreg: int | None = None, loop: bool = False,
                 fence: bool = True, between: str = "", in_flight: str = "", extern: bool = False) -> str:  # fmt: skip
    """A small m64nNk16 bf16 wgmma kernel (descriptors from parameters: it assembles, it is not meant to run).
    `sets` accumulator sets; `loop`: 8 iterations keeping one wgmma group in flight (wait_group 1);
    `between`: an op (_IN_FLIGHT_OPS) and a second wgmma inside the same group; `in_flight`: an op between
    commit and wait; `extern`: `helper` is declared, not defined (assemble with -c)."""
    per_set = n // 2

    def mma(s: int) -> str:
        acc = ", ".join(f"%f{s * per_set + i}" for i in range(per_set))
        return f"\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 \t{{{acc}}}, %rd2, %rd3, 1, 1, 1, 0, 0;"

    helper = (_EXTERN_HELPER if extern else _HELPER) if "call" in between + in_flight else ""
    entry = _WGMMA_ENTRY.format(name=name, maxnreg=f".maxnreg {maxnreg}\n" if maxnreg else "",
                                registers=per_set * sets + 1)  # fmt: skip
    body = [f"\tmov.f32 \t%f{i}, 0f00000000;" for i in range(per_set * sets)]
    body += ["$L_loop:"] * loop + ["\twgmma.fence.sync.aligned;"] * fence + [mma(s) for s in range(sets)]
    body += [_IN_FLIGHT_OPS[between], mma(0)] if between else []
    body += ["\twgmma.commit_group.sync.aligned;", *([_IN_FLIGHT_OPS[in_flight]] if in_flight else [])]
    body += [_LOOP_END] * loop + ["\twgmma.wait_group.sync.aligned 0;"]
    body += [f"\tst.global.f32 \t[%rd6+{4 * i}], %f{i};" for i in range(per_set * sets)]
    return f".version 8.0\n.target sm_90a\n.address_size 64\n\n{helper}{entry}" + "\n".join(body) + "\n\tret;\n}\n"


# name → (generator keywords, extra ptxas options, the codes ptxas 13.0.88 was seen to print for it)
PTXAS_CASES: dict[str, tuple[dict[str, Any], list[str], tuple[str, ...]]] = {
    "wgmma_pipelined_clean": ({"loop": True}, [], ()),
    "wgmma_no_fence": ({"fence": False}, [], ("C7519",)),
    "wgmma_acc_defined_between_mmas": ({"between": "define"}, [], ("C7517", "C7519")),
    "wgmma_acc_read_in_flight": ({"loop": True, "in_flight": "read"}, [], ("C7514", "C7517")),
    "wgmma_acc_defined_in_flight": ({"loop": True, "in_flight": "define"}, [], ("C7515", "C7517")),
    "wgmma_extern_call_in_flight": ({"loop": True, "in_flight": "call", "extern": True}, ["-c"], ("C7509",)),
    "wgmma_extern_call_between_mmas": ({"between": "call", "extern": True}, ["-c"], ("C7520",)),
    "wgmma_indirect_call_in_flight": ({"loop": True, "in_flight": "indirect_call"}, [], ("C7510",)),
    "wgmma_register_cap": ({"n": 128, "sets": 2, "maxnreg": 128, "loop": True}, [], ("C7511",)),
}
_CODE = re.compile(r"\((C\d{4})\)")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_binaries() -> dict[str, str]:
    """Every distinct ptxas this machine has: the one tools/toolchain.py picks, PATH's, the CUDA install's."""
    from tools.toolchain import ToolNotFound, find_tool

    found: dict[str, str] = {}
    with contextlib.suppress(ToolNotFound):
        tool_ = find_tool("ptxas")
        found[f"toolchain ({tool_.origin}, {tool_.version})"] = str(tool_.path)
    for label, path in (("PATH", shutil.which("ptxas")), ("/usr/local/cuda", "/usr/local/cuda/bin/ptxas")):
        if path and Path(path).is_file() and os.path.realpath(path) not in map(os.path.realpath, found.values()):
            found[label] = path
    return found


def ptxas_case(ptxas: str, name: str, folder: Path) -> dict[str, Any]:
    """One PTXAS_CASES kernel through one ptxas: its exit status, the C-codes and the whole info lines."""
    keywords, options, expected = PTXAS_CASES[name]
    src = folder / f"{name}.ptx"
    src.write_text(wgmma_kernel(name, **keywords))
    result = tool([ptxas, "-arch=sm_90a", "-v", *options, "-o", folder / f"{name}.cubin", src], 60, cwd=folder)
    log = (result["stdout"] + result["stderr"]).replace(str(src), src.name)
    lines = [line for line in log.splitlines() if line.strip() and "Compile time" not in line]
    codes = sorted(set(_CODE.findall(log)))
    spills = [list(map(int, m.groups())) for m in _SPILLS.finditer(log)]
    return {
        "rc": result["rc"],
        "codes": codes,
        "expected": list(expected),
        "as_expected": codes == sorted(expected),
        "spills": spills,
        "lines": lines,
    }


def assemble(ptx: str, line_info: bool) -> bytes:
    """PTX → sm_90a cubin with the repository's ptxas wrapper; `line_info`: every statement tagged with its
    line in `ptx` (tools/lineinfo.py), as the diagnosis copy is."""
    from tasks.schema import Arch
    from tools.assemble import compile_ptx
    from tools.lineinfo import tag_lines

    compiled = compile_ptx(tag_lines(ptx) if line_info else ptx, Arch.SM_90A, 60, line_info=line_info)
    if not compiled.ok or compiled.cubin is None:
        raise ProbeError(f"ptxas failed: {compiled.message()}")
    return compiled.cubin


# ------------------------------------------------------------------------------------ the reference GEMM


def build_gemm(m: int | None) -> tuple[bytes, Any]:
    """The reference sm_90a GEMM answer through the pipeline's static stages, planned at M=`m` (the task's
    own M when None): its cubin and LaunchPlan."""
    from tasks import get_task
    from tasks.schema import Arch
    from tasks.solutions import reference_answer
    from tools.options import EvalOptions
    from tools.pipeline import build, extract
    from tools.plan import plan_launches

    task, arch = get_task(GEMM_TASK), Arch.SM_90A
    static = extract(task, arch, answer=reference_answer(GEMM_TASK, arch))
    if static.failed or static.solution is None:
        raise ProbeError(f"the reference answer did not extract: {static.failed and static.failed.message}")
    if m is not None:
        plan = plan_launches(static.solution.launch, task, arch, {**task.dims, "M": m})
        static = static.model_copy(update={"plan": plan})
    static = build(static, task, arch, EvalOptions())
    if static.module is None:
        raise ProbeError(f"the reference answer did not build: {static.failed and static.failed.message}")
    return static.module.cubin, static.module.plan


_TEXT_SECTION = re.compile(r"^\s*\.text\.([\w$.]+):")
_OFFSET_OPCODE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[\w]+)*)")


def sass_offsets(cubin: bytes) -> dict[str, dict[int, str]]:
    """Kernel → SASS offset within the kernel → opcode with modifiers, from nvdisasm (tools/sass.py); CUPTI's
    SASS metrics name instructions by function and offset."""
    from tools import sass

    kernels: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in sass.disassemble(cubin).splitlines():
        if section := _TEXT_SECTION.match(line):
            current = kernels.setdefault(section.group(1), {})
        elif (m := _OFFSET_OPCODE.match(line)) and current is not None:
            current[int(m.group(1), 16)] = m.group(2)
    return kernels


def write_gemm_bundle(folder: Path, m: int) -> dict[str, Any]:
    """The GEMM at M=`m` as a launcher bundle (tools/gpu/launcher.py) plus its SASS offsets; returns facts."""
    from tools.gpu import launcher

    cubin, plan = build_gemm(m)
    launcher.write_bundle(folder, cubin, plan)
    offsets = sass_offsets(cubin)
    (folder / "sass_offsets.json").write_text(json.dumps(offsets))
    ops = Counter(op.split(".")[0] for op in offsets.get(GEMM_KERNEL, {}).values())
    return {
        "M": m,
        "grid": plan.launches[0].grid,
        "block": plan.launches[0].block,
        "static_HGMMA": ops["HGMMA"],
        "static_UTMALDG": ops["UTMALDG"],
        "static_instructions": sum(ops.values()),
    }


class DriverGemm:
    """The GEMM bundle's launches on buffers filled with bf16 ones (executed instruction counts do not depend
    on the values), through cuda.bindings alone: no torch, so no other CUPTI client in the process."""

    def __init__(self, bundle: Path):
        from cuda.bindings import driver as cu

        from tasks.schema import DTYPE_BYTES
        from tools.gpu import driver
        from tools.plan import LaunchPlan

        self.driver, self.bundle = driver, bundle
        self.plan = plan = LaunchPlan.model_validate_json((bundle / "plan.json").read_text())
        driver.call(cu.cuInit, 0)
        self.context = driver.call(cu.cuDevicePrimaryCtxRetain, driver.call(cu.cuDeviceGet, 0))
        driver.call(cu.cuCtxSetCurrent, self.context)
        addresses = {}
        for b in plan.buffers:
            count = math.prod(b.shape)
            address = int(driver.call(cu.cuMemAlloc, count * DTYPE_BYTES[b.dtype]))
            if b.role == "input" and b.dtype == "bfloat16":
                driver.call(cu.cuMemsetD16, address, 0x3F80, count)
            else:
                driver.call(cu.cuMemsetD8, address, 0, count * DTYPE_BYTES[b.dtype])
            addresses[b.name] = address
        self.addresses = addresses
        self.modules: list[Any] = []
        self.load()

    def load(self) -> None:
        """Load the cubin as a new module and launch from it from now on (CUPTI may patch only the modules
        loaded while it collects)."""
        self.modules.append(self.driver.load_module((self.bundle / "kernel.cubin").read_bytes()))
        self.launches = self.driver.prepare_launches(self.modules[-1], self.plan, self.addresses)

    @property
    def context_pointer(self) -> int:
        return int(self.context)

    def launch_ms(self) -> float:
        """One launch sequence and a synchronize: host milliseconds."""
        start = time.perf_counter()
        for launch in self.launches:
            launch.launch(0)
        self.driver.synchronize()
        return round((time.perf_counter() - start) * 1e3, 3)


class TorchGemm:
    """The GEMM's launches on torch buffers (inputs N(0,1)), on torch's current stream."""

    def __init__(self, cubin: bytes, plan: Any):
        import torch

        from tasks.inputs import TORCH_DTYPES
        from tools.gpu import driver

        buffers = {}
        for b in plan.buffers:
            t = torch.empty(b.shape, dtype=TORCH_DTYPES[b.dtype], device="cuda")
            t.normal_() if b.role == "input" else t.zero_()
            buffers[b.name] = t
        self.buffers = buffers  # kept alive: the launches hold their addresses
        self.launches = driver.prepare_launches(
            driver.load_module(cubin), plan, {n: t.data_ptr() for n, t in buffers.items()}
        )
        self.stream = torch.cuda.current_stream().cuda_stream

    def __call__(self) -> None:
        for launch in self.launches:
            launch.launch(self.stream)


# ---------------------------------------------------------------------------------- CUPTI through ctypes
# The profiler's structs and the ctypes wrapper are tools/gpu/cupti_counts.py's (the worker counts with them); the
# SASS metrics API's structs (cupti_sass_metrics.h, CUDA 13.0), which only this probe uses, are here.

MetricDetails = params("CUpti_SassMetrics_MetricDetails", "metricId:u64 pMetricName:str pMetricDescription:str",
                       head=False)  # fmt: skip
SassConfig = params("CUpti_SassMetrics_Config", "metricId:u64 outputGranularity:u8", head=False)
InstanceValue = params("CUpti_SassMetrics_InstanceValue", "metricId:u64 value:u64", head=False)
SassData = params("CUpti_SassMetrics_Data", "cubinCrc:u32 functionIndex:u32 functionName:str pcOffset:u32 "
                  "pInstanceValues:ptr")  # fmt: skip
SassGetNumOfMetrics = params("CUpti_SassMetrics_GetNumOfMetrics_Params", "pChipName:str numOfMetrics:size")
SassGetMetrics = params("CUpti_SassMetrics_GetMetrics_Params", "pChipName:str numOfMetrics:size pMetricsList:ptr")
SassGetProperties = params("CUpti_SassMetrics_GetProperties_Params", "pChipName:str pMetricName:str "
                           "metric:MetricDetails", types={"MetricDetails": MetricDetails})  # fmt: skip
SassSetConfig = params("CUpti_SassMetricsSetConfig_Params", "numOfMetricConfig:size pConfigs:ptr deviceIndex:u32")
SassUnsetConfig = params("CUpti_SassMetricsUnsetConfig_Params", "deviceIndex:u32")
SassEnable = params("CUpti_SassMetricsEnable_Params", "ctx:ptr enableLazyPatching:u8")
SassDisable = params("CUpti_SassMetricsDisable_Params", "ctx:ptr numOfDroppedRecords:size")
SassGetDataProperties = params("CUpti_SassMetricsGetDataProperties_Params", "ctx:ptr "
                               "numOfPatchedInstructionRecords:size numOfInstances:size")  # fmt: skip
SassFlushData = params("CUpti_SassMetricsFlushData_Params", "ctx:ptr numOfPatchedInstructionRecords:size "
                       "numOfInstances:size pMetricsData:ptr", size_field="numOfInstances")  # fmt: skip

API_SASS_METRICS = 2  # CUpti_Profiler_API
GPU_GRANULARITY = 0  # CUpti_SassMetrics_OutputGranularity: one value for the whole GPU


def libcupti_candidates() -> list[str]:
    return library_candidates()


class Cupti(cupti_counts.Cupti):
    def start(self, api: int) -> tuple[bytes, dict[str, str]]:
        """Initialize the profiler; the chip's name and whether the device supports `api`, field by field."""
        self("cuptiProfilerInitialize", ProfilerInitialize)
        return self.chip(0), self.support(0, api)


_names_array = names_array


def _sass_flush(cupti: Cupti, ctx: int, metric_names: dict[int, str], offsets: dict[str, dict[int, str]]) -> dict:
    """Flush the SASS metrics collected so far; per metric, executed counts by opcode (the base opcode, as
    Nsight Compute's sass__inst_executed_per_opcode names them) and the kernels they came from."""
    props = cupti("cuptiSassMetricsGetDataProperties", SassGetDataProperties, ctx=ctx)
    records, instances = props.numOfPatchedInstructionRecords, props.numOfInstances
    if not records or not instances:
        return {"records": records, "instances": instances}
    data = (SassData * records)()
    values = [(InstanceValue * instances)() for _ in range(records)]
    for d, v in zip(data, values, strict=True):
        d.structSize, d.pInstanceValues = ctypes.sizeof(SassData), ctypes.addressof(v)
    cupti("cuptiSassMetricsFlushData", SassFlushData, ctx=ctx, numOfPatchedInstructionRecords=records,
          numOfInstances=instances, pMetricsData=data)  # fmt: skip
    by_opcode: dict[str, Counter[str]] = {}
    functions: Counter[str] = Counter()
    for d, v in zip(data, values, strict=True):
        function = (d.functionName or b"").decode(errors="replace")
        functions[function] += 1
        opcode = offsets.get(function, {}).get(str(d.pcOffset))
        key = opcode.split(".")[0] if opcode else f"unmapped@{d.pcOffset:#x}"
        for value in v:
            by_opcode.setdefault(metric_names.get(value.metricId, str(value.metricId)), Counter())[key] += value.value
    return {"records": records, "instances": instances, "functions": dict(functions),
            "by_opcode": {m: dict(c.most_common()) for m, c in by_opcode.items()}}  # fmt: skip


def route_sass_metrics(bundle: Path) -> dict[str, Any]:
    """CUPTI's SASS metrics API (cupti_sass_metrics.h) through ctypes on the image's libcupti: per-instruction
    executed counts, warp-level and thread-level, of two profiled launches (the first patches the kernel)."""
    out: dict[str, Any] = {"candidates": libcupti_candidates()}
    gemm = DriverGemm(bundle)
    offsets = json.loads((bundle / "sass_offsets.json").read_text())
    cupti = Cupti(out["candidates"][0])
    chip, out["device_supported"] = cupti.start(API_SASS_METRICS)
    out.update(library=cupti.path, chip=chip.decode())
    count = cupti("cuptiSassMetricsGetNumOfMetrics", SassGetNumOfMetrics, pChipName=chip).numOfMetrics
    details = (MetricDetails * count)()
    cupti("cuptiSassMetricsGetMetrics", SassGetMetrics, pChipName=chip, numOfMetrics=count, pMetricsList=details)
    available = [(d.pMetricName or b"").decode() for d in details]
    thread = [
        m for m in ("smsp__sass_thread_inst_executed_pred_on", "smsp__sass_thread_inst_executed") if m in available
    ]
    wanted = ["smsp__sass_inst_executed", *thread[:1]]
    names: dict[int, str] = {}
    for metric in wanted:
        p = cupti("cuptiSassMetricsGetProperties", SassGetProperties, pChipName=chip, pMetricName=metric.encode())
        names[p.metric.metricId] = metric
    configs = (SassConfig * len(names))(*[SassConfig(i, GPU_GRANULARITY) for i in names])
    cupti("cuptiSassMetricsSetConfig", SassSetConfig, numOfMetricConfig=len(names), pConfigs=configs, deviceIndex=0)
    out.update(metrics_available=available, metrics=wanted, unprofiled_ms=[gemm.launch_ms() for _ in range(3)])
    ctx = gemm.context_pointer
    cupti("cuptiSassMetricsEnable", SassEnable, ctx=ctx, enableLazyPatching=1)
    runs = []
    for module in ("loaded before enable", "loaded after enable", "loaded after enable"):
        if module == "loaded after enable" and len(gemm.modules) == 1:
            gemm.load()
        launch_ms = gemm.launch_ms()
        start = time.perf_counter()
        counts = _sass_flush(cupti, ctx, names, offsets)
        runs.append({"module": module, "launch_ms": launch_ms,
                     "flush_ms": round((time.perf_counter() - start) * 1e3, 3), **counts})  # fmt: skip
    out["dropped_records"] = cupti("cuptiSassMetricsDisable", SassDisable, ctx=ctx).numOfDroppedRecords
    cupti("cuptiSassMetricsUnsetConfig", SassUnsetConfig, deviceIndex=0)
    counted = [r for r in runs if r.get("by_opcode")]
    out.update(runs=runs, counts=counted[-1]["by_opcode"] if counted else {})
    out["same_counts_every_counted_launch"] = all(r["by_opcode"] == counted[0]["by_opcode"] for r in counted)
    return out


RANGE_METRICS = ("sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__inst_executed_pipe_tensor_op_gmma.sum",
                 "smsp__sass_inst_executed_op_tma_ld.sum", "smsp__inst_executed.sum",
                 "gpu__time_duration.sum")  # fmt: skip


def _range_metrics(cupti: Cupti, host: int) -> dict[str, Any]:
    """The counter metrics related to gmma and TMA that the host lists, and which of RANGE_METRICS (and of
    those, with .sum) it accepts."""
    base = cupti("cuptiProfilerHostGetBaseMetrics", HostGetBaseMetrics, pHostObject=host, metricType=COUNTER_METRIC)
    listed = ctypes.cast(base.ppMetricNames, ctypes.POINTER(ctypes.c_char_p))
    bases = [listed[i].decode() for i in range(base.numMetrics)]
    related = [b for b in bases if re.search(r"gmma|tma|inst_executed_pipe_tensor|inst_executed_op", b)]
    wanted = [*RANGE_METRICS, *[f"{b}.sum" for b in related if "tma" in b and f"{b}.sum" not in RANGE_METRICS][:6]]
    valid, rejected = [], {}
    for metric in wanted:
        try:
            cupti("cuptiProfilerHostGetMetricProperties", HostGetMetricProperties, pHostObject=host,
                  pMetricName=metric.encode())  # fmt: skip
            valid.append(metric)
        except CuptiError as e:
            rejected[metric] = str(e)
    return {"base_metric_count": len(bases), "base_metrics_related": related[:120], "metrics": valid,
            "rejected": rejected}  # fmt: skip


def route_range_profiler(bundle: Path) -> dict[str, Any]:
    """CUPTI's range profiler (hardware counters, cupti_range_profiler.h + cupti_profiler_host.h) through ctypes:
    the tensor-pipe and TMA counters of one launch, replayed as many passes as the metrics need."""
    gemm = DriverGemm(bundle)
    cupti = Cupti(libcupti_candidates()[0])
    chip, support = cupti.start(API_RANGE_PROFILING)
    out: dict[str, Any] = {"library": cupti.path, "device_supported": support}
    ctx = gemm.context_pointer
    size = cupti("cuptiProfilerGetCounterAvailability", GetCounterAvailability, ctx=ctx).counterAvailabilityImageSize
    availability = (ctypes.c_uint8 * size)()
    cupti("cuptiProfilerGetCounterAvailability", GetCounterAvailability, ctx=ctx, counterAvailabilityImageSize=size,
          pCounterAvailabilityImage=availability)  # fmt: skip
    host = cupti("cuptiProfilerHostInitialize", HostInitialize, profilerType=RANGE_PROFILER_TYPE, pChipName=chip,
                 pCounterAvailabilityImage=availability).pHostObject  # fmt: skip
    out.update(_range_metrics(cupti, host))
    valid = out["metrics"]
    if not valid:
        raise ProbeError(f"no metric was accepted: {out['rejected']}")
    names = _names_array(valid)
    config, out["passes_needed"] = cupti.config(host, valid)
    image_size = len(config)
    out["unprofiled_ms"] = [gemm.launch_ms() for _ in range(3)]
    start = time.perf_counter()
    profiler = cupti("cuptiRangeProfilerEnable", RangeEnable, ctx=ctx).pRangeProfilerObject
    data_size = cupti("cuptiRangeProfilerGetCounterDataSize", RangeGetCounterDataSize, pRangeProfilerObject=profiler,
                      pMetricNames=names, numMetrics=len(valid), maxNumOfRanges=1,
                      maxNumRangeTreeNodes=1).counterDataSize  # fmt: skip
    data = (ctypes.c_uint8 * data_size)()
    cupti("cuptiRangeProfilerCounterDataImageInitialize", RangeCounterDataInitialize, pRangeProfilerObject=profiler,
          counterDataSize=data_size, pCounterData=data)  # fmt: skip
    cupti("cuptiRangeProfilerSetConfig", RangeSetConfig, pRangeProfilerObject=profiler, configSize=image_size,
          pConfig=config, counterDataImageSize=data_size, pCounterDataImage=data, range=AUTO_RANGE,
          replayMode=USER_REPLAY, maxRangesPerPass=1, numNestingLevels=1, minNestingLevel=1, passIndex=0,
          targetNestingLevel=1)  # fmt: skip
    launches = []
    for _ in range(CUPTI_MAX_PASSES):
        cupti("cuptiRangeProfilerStart", RangeStart, pRangeProfilerObject=profiler)
        launches.append(gemm.launch_ms())
        if cupti("cuptiRangeProfilerStop", RangeStop, pRangeProfilerObject=profiler).isAllPassSubmitted:
            break
    cupti("cuptiRangeProfilerDecodeData", RangeDecode, pRangeProfilerObject=profiler)
    out["ranges"] = cupti("cuptiRangeProfilerGetCounterDataInfo", RangeGetCounterDataInfo, pCounterDataImage=data,
                          counterDataImageSize=data_size).numTotalRanges  # fmt: skip
    values = (ctypes.c_double * len(valid))()
    cupti("cuptiProfilerHostEvaluateToGpuValues", HostEvaluate, pHostObject=host, pCounterDataImage=data,
          counterDataImageSize=data_size, rangeIndex=0, ppMetricNames=names, numMetrics=len(valid),
          pMetricValues=values)  # fmt: skip
    out["profiled_ms"] = round((time.perf_counter() - start) * 1e3, 3)
    cupti("cuptiRangeProfilerDisable", RangeDisable, pRangeProfilerObject=profiler)
    cupti("cuptiProfilerHostDeinitialize", HostDeinitialize, pHostObject=host)
    out.update(pass_launch_ms=launches, values=dict(zip(valid, values, strict=True)))
    return out


def route_cupti_python_activity(bundle: Path) -> dict[str, Any]:
    """cupti-python (the 13.0 wheel, matching the image's libcupti): which profiling routes the package exposes,
    and whether the activity API's INSTRUCTION_EXECUTION (and SOURCE_LOCATOR) records come for one launch."""
    from importlib.metadata import version

    from cupti import cupti

    out: dict[str, Any] = {"cupti_python": version("cupti-python")}
    out["api_names"] = sorted(
        n for n in dir(cupti) if re.search(r"sass|profiler|pm_sampling|range|pc_sampling", n, re.I)
    )
    gemm = DriverGemm(bundle)
    records: list[tuple[int, dict[str, str]]] = []

    def completed(activities: list) -> None:  # read at once: a record lives as long as CUPTI's buffer
        for a in activities:
            records.append((a.kind, {f: str(getattr(a, f)) for f in dir(a) if not f.startswith("_")}))

    cupti.activity_register_callbacks(lambda: (8 << 20, 0), completed)
    enabled = {}
    for kind in ("INSTRUCTION_EXECUTION", "SOURCE_LOCATOR", "CONCURRENT_KERNEL"):
        try:
            cupti.activity_enable(getattr(cupti.ActivityKind, kind))
            enabled[kind] = "enabled"
        except Exception as e:
            enabled[kind] = f"{type(e).__name__}: {e}"
    out["enable"] = enabled
    gemm.load()  # a module loaded while the records are on, in case only those are patched
    out["launch_ms"] = gemm.launch_ms()
    cupti.activity_flush_all(1)
    kinds = Counter(cupti.ActivityKind(kind).name for kind, _ in records)
    out.update(records_by_kind=dict(kinds), libcupti_loaded=loaded_libraries("libcupti"))
    out["instruction_record"] = next((f for k, f in records if k == cupti.ActivityKind.INSTRUCTION_EXECUTION), None)
    return out


def route_pm_sampling(bundle: Path) -> dict[str, Any]:
    """cupti-python 13.4's PM sampling collector (its libcupti is 13.4, newer than the image's driver may take):
    the gmma and instruction counters summed over the samples of one launch."""
    from importlib.metadata import version

    from cupti import pm_sampling

    out: dict[str, Any] = {"cupti_python": version("cupti-python")}
    gemm = DriverGemm(bundle)
    metrics = ["sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__inst_executed.sum"]
    collector = pm_sampling.Collector(0)
    collector.enable()
    out["libcupti_loaded"] = loaded_libraries("libcupti")
    try:
        collector.configure(metrics=metrics, sampling_interval=20000)
        out["unprofiled_ms"] = [gemm.launch_ms() for _ in range(2)]
        collector.start()
        out["launch_ms"] = gemm.launch_ms()
        collector.stop()
        data = collector.decode()
        samples = list(data)
        out.update(
            samples=len(samples),
            metrics=list(data.metrics),
            sums={m: sum(s.metric_values[i] for s in samples) for i, m in enumerate(data.metrics)},
        )
    finally:
        collector.disable()
    return out


ROUTES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "sass_metrics": route_sass_metrics,
    "range_profiler": route_range_profiler,
    "cupti_python_activity": route_cupti_python_activity,
    "pm_sampling_13_4": route_pm_sampling,
}


# ------------------------------------------------------------------------------------------------ probes


def probe_ptxas_codes(rec: Record, args: argparse.Namespace) -> str:
    """Issue 28: which info lines (C-codes, word for word) do ptxas 13.0 print for kernels whose wgmma it
    serializes or whose register cap makes it spill — the image's ptxas and the repository's wheel ptxas?"""
    binaries = ptxas_binaries()
    with rec.step("binaries") as s:
        for label, path in binaries.items():
            version = tool([path, "--version"], 20)["stdout"].strip().splitlines()
            s.setdefault("found", {})[label] = {"path": path, "version": version[-2:]}
        if not binaries:
            raise ProbeError("no ptxas found")
    seen: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("probe")) as tmp:
        for label, path in binaries.items():
            with rec.step(f"cases {label}") as s:
                s["cases"] = {name: ptxas_case(path, name, Path(tmp)) for name in PTXAS_CASES}
                seen[label] = {code for case in s["cases"].values() for code in case["codes"]}
    return "; ".join(f"{label}: {' '.join(sorted(codes)) or 'none'}" for label, codes in seen.items())


def _ncu_gemm_counts(bundle: Path, timeout_s: float) -> dict[str, Any]:
    """Nsight Compute's executed counts per opcode for the bundle's launch, collected as tools/gpu/profile.py
    collects them (the same metrics, kernel filter and launcher)."""
    from tools.gpu import launcher, ncu, profile

    collect = ["-k", profile.kernel_filter([GEMM_KERNEL]), "-c", "1", "--metrics", ",".join(profile.METRICS)]
    start = time.perf_counter()
    raw = ncu.profile_raw(
        launcher.command(bundle), collect, env=launcher.environment(0), timeout_s=timeout_s, instances=True
    )
    seconds = round(time.perf_counter() - start, 3)
    launches = profile.parse_report(raw)
    if not launches:
        raise ProbeError(f"ncu's report held no launch: {ncu.tail(raw)}")
    return {
        "seconds": seconds,
        "warp": dict(launches[0][profile.WARP]),
        "thread": dict(launches[0][profile.THREAD]),
        "raw_csv": raw,
    }


def _run_route(rec: Record, route: str, bundle: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """A CUPTI route in its own process (one CUPTI client per process); its result, or why there is none."""
    result_file = bundle / f"{route}.json"
    cmd = [sys.executable, "-m", "tools.dev.probe_h200", "--route", route, "--bundle", bundle, "--result", result_file]
    run = tool(cmd, timeout_s, env=env, cwd=REPO_ROOT)
    rec.raw(f"{route}.log", f"$ {run['cmd']}\n{run['stdout']}\n{run['stderr']}")
    if not result_file.is_file():
        raise ProbeError(f"the route wrote no result (exit {run['rc']}): {excerpt(run['stderr'], 1500)}")
    result = json.loads(result_file.read_text())
    result["process_seconds"] = run["seconds"]
    return result


def probe_cupti_counts(rec: Record, args: argparse.Namespace) -> str:
    """Issue 32: can CUPTI, in the process that launches the kernel, count one reference-GEMM launch's executed
    HGMMA (warp-level and predicate-true thread-level) and UTMALDG instructions as Nsight Compute's
    sass__inst_executed_per_opcode does — by which route (the SASS metrics API, the range profiler's hardware
    counters, cupti-python's activity records, PM sampling), at what cost per launch?"""
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("probe")) as tmp:
        bundle = Path(tmp) / "bundle"
        with rec.step("build") as s:
            s.update(write_gemm_bundle(bundle, args.gemm_m))
        if not (bundle / "plan.json").is_file():
            return "the reference GEMM did not build"
        with rec.step("ncu") as s:
            counts = _ncu_gemm_counts(bundle, 90)
            s["raw"] = rec.raw("ncu_counts.csv", counts.pop("raw_csv"))
            s.update(counts)
            results["ncu"] = counts
        folders = [*dict.fromkeys(str(Path(p).parent) for p in libcupti_candidates())]  # its nvperf libraries too
        base_env = child_env(LD_LIBRARY_PATH=os.pathsep.join([*folders, os.environ.get("LD_LIBRARY_PATH", "")]))
        for route in ROUTES:
            env = dict(base_env)
            if route == "pm_sampling_13_4":  # its own libcupti (13.4), ahead of the image's
                site = args.cupti134_site
                env["PYTHONPATH"] = os.pathsep.join((site, env["PYTHONPATH"]))
                env["LD_LIBRARY_PATH"] = os.pathsep.join((f"{site}/nvidia/cu13/lib", env["LD_LIBRARY_PATH"]))
            with rec.step(f"route {route}") as s:
                if route == "pm_sampling_13_4" and not args.cupti134_site:
                    raise ProbeError("no --cupti134-site given")
                s.update(_run_route(rec, route, bundle, env, 60))
                if not s["worked"]:
                    raise ProbeError(s["error"])
                results[route] = s
    return _counts_answer(results)


def _counts_answer(results: dict[str, dict[str, Any]]) -> str:
    """One line: HGMMA and UTMALDG by each route that counted, beside ncu's, and each route's cost."""
    ncu = results.get("ncu", {})
    parts = [
        f"ncu HGMMA {ncu.get('warp', {}).get('HGMMA')} (thread {ncu.get('thread', {}).get('HGMMA')}), "
        f"UTMALDG {ncu.get('warp', {}).get('UTMALDG')}"
    ]
    sass = results.get("sass_metrics", {}).get("counts", {})
    if sass:
        warp = sass.get("smsp__sass_inst_executed", {})
        thread = next((v for k, v in sass.items() if "thread" in k), {})
        runs, alone = results["sass_metrics"]["runs"], min(results["sass_metrics"]["unprofiled_ms"])
        cost = ", ".join(f"+{r['launch_ms'] - alone:.1f} ms ({r['module']}, {r['records']} records)" for r in runs)
        parts.append(f"SASS metrics HGMMA {warp.get('HGMMA')} (thread {thread.get('HGMMA')}), UTMALDG "
                     f"{warp.get('UTMALDG')}: {cost}")  # fmt: skip
    values = results.get("range_profiler", {}).get("values", {})
    if values:
        gmma = {k: v for k, v in values.items() if "gmma" in k or "tma" in k}
        parts.append("range profiler " + ", ".join(f"{k} {v:.0f}" for k, v in gmma.items()))
    activity = results.get("cupti_python_activity", {})
    if activity:
        parts.append(f"activity INSTRUCTION_EXECUTION: {activity.get('enable', {}).get('INSTRUCTION_EXECUTION')}")
    pm = results.get("pm_sampling_13_4", {}).get("sums")
    if pm:
        parts.append("PM sampling " + ", ".join(f"{k} {v:.0f}" for k, v in pm.items()))
    return "; ".join(parts)


def probe_cupti_durations(rec: Record, args: argparse.Namespace) -> str:
    """Issue 29: what duration does CUPTI's activity API (CONCURRENT_KERNEL records) give the reference GEMM at
    the task's size, against CUDA events, over 20 cold-L2 launches; and can flashinfer's
    bench_gpu_time_with_cupti semantics (per iteration: the kernels launched inside the iteration's host window,
    found through the launch calls' correlation ids; their span and the sum of their durations) be had?"""
    import torch

    from tools.gpu.timing import L2Flush

    with rec.step("build") as s:
        cubin, plan = build_gemm(None)  # the task's own size, as the timing stage runs it
        gemm = TorchGemm(cubin, plan)
        flush = L2Flush(torch.cuda.get_device_properties(0).L2_cache_size, torch.device("cuda"))
        for _ in range(5):
            flush()
            gemm()
        torch.cuda.synchronize()
        s["grid"] = plan.launches[0].grid
    if not s["ok"]:
        return f"the GEMM did not run: {s['error']}"
    iterations = 20

    def timed(launches_per_iteration: int, mark: Callable[[], int] | None = None) -> tuple[list[float], list[tuple]]:
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iterations)
        ]
        windows = []
        for start, end in events:
            flush()
            t0 = mark() if mark else 0
            start.record()
            for _ in range(launches_per_iteration):
                gemm()
            end.record()
            windows.append((t0, mark() if mark else 0))
        torch.cuda.synchronize()
        return [round(a.elapsed_time(b), 5) for a, b in events], windows

    with rec.step("events_alone") as s:
        host = time.perf_counter()
        s["events_ms"], _ = timed(1)
        s["host_s"] = round(time.perf_counter() - host, 4)
        events_alone = s["events_ms"]
    with rec.step("cupti_activity") as s:
        from importlib.metadata import version

        from cupti import cupti

        s["cupti_python"] = version("cupti-python")
        records: list[tuple] = []
        kinds = cupti.ActivityKind

        def completed(activities: list) -> None:
            for a in activities:
                records.append((a.kind, getattr(a, "name", ""), a.start, a.end, a.correlation_id))

        cupti.activity_register_callbacks(lambda: (8 << 20, 0), completed)
        for kind in (kinds.CONCURRENT_KERNEL, kinds.DRIVER, kinds.RUNTIME):
            cupti.activity_enable(kind)
        host = time.perf_counter()
        single_events, single_windows = timed(1, cupti.get_timestamp)
        host_s = round(time.perf_counter() - host, 4)
        pair_events, pair_windows = timed(2, cupti.get_timestamp)
        cupti.activity_flush_all(1)
        for kind in (kinds.CONCURRENT_KERNEL, kinds.DRIVER, kinds.RUNTIME):
            cupti.activity_disable(kind)
        s["libcupti_loaded"] = loaded_libraries("libcupti")
        kernels = [r for r in records if r[0] == kinds.CONCURRENT_KERNEL]
        launches = [r for r in records if r[0] in (kinds.DRIVER, kinds.RUNTIME)]
        s["kernel_names"] = dict(Counter(r[1] for r in kernels).most_common(6))
        single = iteration_spans(single_windows, launches, kernels)
        pairs = iteration_spans(pair_windows, launches, kernels)
        s.update(
            host_s=host_s,
            events_ms=single_events,
            cupti_ms=[x["sum_ms"] for x in single],
            kernels_per_iteration=[x["kernels"] for x in single],
            pair_events_ms=pair_events,
            pair_sum_ms=[x["sum_ms"] for x in pairs],
            pair_span_ms=[x["span_ms"] for x in pairs],
        )
        cupti_ms = s["cupti_ms"]
        s["median"] = {
            "events_alone": _median(events_alone),
            "events_with_cupti": _median(single_events),
            "cupti": _median(cupti_ms),
            "pair_sum": _median(s["pair_sum_ms"]),
            "pair_span": _median(s["pair_span_ms"]),
            "pair_events": _median(pair_events),
        }
        if not cupti_ms or not all(cupti_ms):
            raise ProbeError("some iterations had no kernel record")
    m = s.get("median")
    if not m:
        return f"CUPTI activity: {s.get('error', 'no result')}"
    return (
        f"median CUPTI {m.get('cupti')} ms vs events {m.get('events_with_cupti')} ms (events without CUPTI "
        f"{m.get('events_alone')}); two launches: sum {m.get('pair_sum')}, span {m.get('pair_span')}, events "
        f"{m.get('pair_events')}"
    )


def _median(values: list[float]) -> float | None:
    ordered = sorted(v for v in values if v is not None)
    return round(ordered[len(ordered) // 2], 5) if ordered else None


def iteration_spans(
    windows: list[tuple[int, int]], launches: list[tuple], kernels: list[tuple]
) -> list[dict[str, Any]]:
    """flashinfer's bench_gpu_time_with_cupti reading, per iteration: the launch calls whose start falls in the
    iteration's host window [t0, t1] name (by correlation id) the kernels it ran; their summed durations and
    their span (last end − first start), in ms. Records are (kind, name, start, end, correlation id)."""
    by_correlation: dict[int, list[tuple]] = {}
    for k in kernels:
        by_correlation.setdefault(k[4], []).append(k)
    out = []
    for t0, t1 in windows:
        ids = {call[4] for call in launches if t0 <= call[2] <= t1}
        ran = [k for i in ids for k in by_correlation.get(i, [])]
        out.append(
            {
                "kernels": len(ran),
                "sum_ms": round(sum(k[3] - k[2] for k in ran) / 1e6, 5) if ran else None,
                "span_ms": round((max(k[3] for k in ran) - min(k[2] for k in ran)) / 1e6, 5) if ran else None,
            }
        )
    return out


_NCU_REPORT_SCRIPT = r"""
import json, sys
import ncu_report
report = ncu_report.load_report(sys.argv[1])
action = report.range_by_idx(0).action_by_idx(0)
out = {"action_methods": [m for m in dir(action) if not m.startswith("_")], "kernel": action.name()}
names = list(action.metric_names())
out["metric_count"] = len(names)
per_pc = {}
for name in names:
    metric = action.metric_by_name(name)
    if not metric.has_correlation_ids():
        continue
    ids = metric.correlation_ids()
    rows = []
    for i in range(metric.num_instances()):
        pc = ids.as_uint64(i)
        try:
            value = metric.as_uint64(i)
        except Exception:
            value = metric.as_double(i)
        if not value:
            continue
        info = action.source_info(pc)
        rows.append({"pc": pc, "value": value, "sass": str(action.sass_by_pc(pc)),
                     "file": str(info.file_name()) if info else None, "line": int(info.line()) if info else None})
    per_pc[name] = sorted(rows, key=lambda r: -r["value"])[:40]
out["source_metrics"] = {n: len(v) for n, v in per_pc.items()}
out["per_pc"] = per_pc
out["source_files"] = {k: len(v) for k, v in action.source_files().items()} if hasattr(action, "source_files") else None
json.dump(out, open(sys.argv[2], "w"), indent=1, default=str)
"""


def probe_ncu_source(rec: Record, args: argparse.Namespace) -> str:
    """Issue 28: how does Nsight Compute give, per SASS instruction and per source line of a -lineinfo module,
    the shared-memory bank conflicts (memory_l1_wavefronts_shared_excessive), stall samples and executed
    instructions of a kernel with a 32-way bank-conflicting store — by the CLI's source page (which
    --print-source values) or the ncu_report Python module? Raw outputs are kept for writing the parsers."""
    from tools.gpu import ncu

    path = ncu.find_ncu()
    if path is None:
        with rec.step("find_ncu"):
            raise ProbeError("ncu is not installed here")
        return "no ncu"
    answer = "no per-line values"
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("probe")) as tmp:
        folder = Path(tmp)
        with rec.step("assemble") as s:
            (folder / "kernel.ptx").write_text(BANK_PTX)  # the line table names kernel.ptx, for --import-source
            (folder / "kernel.cubin").write_bytes(assemble(BANK_PTX, line_info=True))
            s["ptx_lines"] = BANK_PTX.count("\n")
        with rec.step("discover") as s:
            sections = tool([path, "--list-sections"], 60)
            s["list_sections"] = rec.raw("list_sections.txt", sections["stdout"])
            available = set(re.findall(r"^\s*(\w+)\s", sections["stdout"], re.M))
            s["sections"] = [
                x
                for x in ("SourceCounters", "WarpStateStats", "InstructionStats", "MemoryWorkloadAnalysis_Tables")
                if x in available
            ]
            queried = tool([path, "--query-metrics"], 90)
            s["query_metrics"] = rec.raw("query_metrics.txt", queried["stdout"] + queried["stderr"])
            bank = sorted(set(re.findall(r"^(\S*bank_conflicts\S*)", queried["stdout"], re.M)))
            s["bank_conflict_metrics"] = bank
            helped = tool([path, "--help"], 30)
            s["help_source_options"] = [
                line.strip()
                for line in helped["stdout"].splitlines()
                if re.search(r"print-source|--page|import-source|source-folders", line)
            ]
        sections_args = [a for x in s.get("sections") or ["SourceCounters"] for a in ("--section", x)]
        extra = [f"{m}.sum" for m in s.get("bank_conflict_metrics", []) if "shared" in m][:6]
        target = [sys.executable, "-m", "tools.dev.probe_h200", "--launch", folder / "kernel.cubin", "--kernel",
                  BANK_KERNEL, "--grid", "132", "--block", "256", "--words", str(132 * 256)]  # fmt: skip
        report = folder / "source.ncu-rep"
        with rec.step("profile") as s:
            base = [path, "--clock-control", "none", "--target-processes", "all", "-k", BANK_KERNEL, "-c", "1",
                    *sections_args, "--import-source", "yes", "-f", "-o", folder / "source"]  # fmt: skip
            attempts = [[*base, "--metrics", ",".join(extra)]] if extra else []
            for cmd in [*attempts, base]:
                run = tool([*cmd, *target], 120, env=child_env(), cwd=folder)
                s.setdefault("attempts", []).append(brief(run))
                if run["rc"] == 0 and report.is_file():
                    break
            if not report.is_file():
                raise ProbeError("ncu made no report")
        for variant in ("sass", "ptx", "cuda", "cuda,sass"):
            with rec.step(f"source_page {variant}") as s:
                run = tool([path, "-i", report, "--page", "source", "--csv", "--print-source", variant], 60)
                s["raw"] = rec.raw(f"source_{variant.replace(',', '_')}.csv", run["stdout"] + run["stderr"])
                s.update(rc=run["rc"], head=run["stdout"].splitlines()[:25], stderr=excerpt(run["stderr"], 800))
                if run["rc"] != 0:
                    raise ProbeError(f"exit {run['rc']}")
        for page in ("details", "raw"):
            with rec.step(f"{page}_page") as s:
                run = tool([path, "-i", report, "--page", page, "--csv"], 60)
                s["raw"] = rec.raw(f"{page}.csv", run["stdout"] + run["stderr"])
                s["shared_lines"] = [
                    line[:300] for line in run["stdout"].splitlines() if re.search(r"bank|wavefront|shared", line, re.I)
                ][:40]
        with rec.step("ncu_report") as s:
            extras = sorted(
                glob.glob(str(path.parent / "extras" / "python"))
                + glob.glob("/opt/nvidia/nsight-compute/*/extras/python")
            )
            if not extras:
                raise ProbeError("no extras/python beside ncu")
            script, result = folder / "read_report.py", folder / "report.json"
            script.write_text(_NCU_REPORT_SCRIPT)
            run = tool([sys.executable, script, report, result], 90, env=dict(os.environ, PYTHONPATH=extras[-1]))
            s.update(module_path=extras[-1], rc=run["rc"], stderr=excerpt(run["stderr"], 1500))
            if not result.is_file():
                raise ProbeError(f"the ncu_report script wrote nothing (exit {run['rc']})")
            data = json.loads(result.read_text())
            s["raw"] = rec.raw("ncu_report.json", json.dumps(data, indent=1))
            s["source_metrics"] = data.get("source_metrics")
            s["action_methods"] = data.get("action_methods")
            top = {
                name: rows[:3]
                for name, rows in data.get("per_pc", {}).items()
                if re.search(r"shared_excessive|bank|inst_executed$|stall", name)
            }
            s["top"] = top
            excessive = next(
                (rows[0] for name, rows in data.get("per_pc", {}).items() if "shared_excessive" in name and rows), None
            )
            if excessive:
                answer = (
                    f"ncu_report: excessive shared wavefronts {excessive['value']} at {excessive['file']}:"
                    f"{excessive['line']} `{excessive['sass']}`"
                )
    return answer


def _bench_ms(fn: Callable[[], Any], reps: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return round(start.elapsed_time(end) / reps, 5)


def _errors(out: Any, ref: Any) -> dict[str, float]:
    """Relative L2 error and DeepGEMM's cosine-style difference (1 − 2·Σxy / Σ(x² + y²))."""
    x, y = out.double(), ref.double()
    return {
        "rel_l2": float((x - y).norm() / y.norm()),
        "cos_diff": float(1 - 2 * (x * y).sum() / (x * x + y * y).sum()),
    }


def probe_fp8_baselines(rec: Record, args: argparse.Namespace) -> str:
    """Issue 27: which fp8 baselines run on this image? torch._scaled_mm with e4m3 inputs and block scales (1×128
    per token for A, 128×128 for B) at M=N=4096, K=7168: which scale layouts torch 2.11 accepts on sm_90 (errors
    verbatim), its time and its error against the fp32 product of the dequantized inputs; cudnn-frontend's fp8
    SDPA forward (per-tensor descales) at B=4, H=48, S=4096, D=128 and 256, causal and not: does it build, its
    time, its error against fp32; and does DeepGEMM import?"""
    import torch

    answers = _scaled_mm_steps(rec, 4096, 4096, 7168)
    torch.cuda.empty_cache()
    with rec.step("cudnn import") as s:
        import cudnn

        s.update(frontend=cudnn.__version__, backend=cudnn.backend_version(), libcudnn=loaded_libraries("libcudnn.so"))
    for d in (128, 256):
        for causal in (False, True):
            with rec.step(f"cudnn fp8 sdpa d{d}{' causal' if causal else ''}") as s:
                s.update(_cudnn_fp8_sdpa(4, 48, 4096, d, causal))
                answers.append(f"cudnn fp8 d{d}{'c' if causal else ''} {s['ms']} ms rel {s['rel_l2']:.2e}")
    with rec.step("deep_gemm") as s:
        import importlib.util

        s["found"] = importlib.util.find_spec("deep_gemm") is not None
        if not s["found"]:
            raise ProbeError("deep_gemm is not installed")
        import deep_gemm  # noqa: F401
    return "; ".join(answers) or "nothing ran"


def _scaled_mm_steps(rec: Record, m: int, n: int, k: int) -> list[str]:
    """torch._scaled_mm (and torch.nn.functional.scaled_mm, where torch has it) on block-scaled e4m3 inputs made
    from bf16 N(0,1) as the paper makes them; each scale layout a step; the answers' parts."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    e4m3, answers = torch.float8_e4m3fn, []
    with rec.step("inputs") as s:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda").bfloat16().float()
        b = torch.randn(n, k, device="cuda").bfloat16().float()
        sa = (a.view(m, k // 128, 128).abs().amax(-1) / 448).clamp_min(1e-12)  # [M, K/128]
        sb = (b.view(n // 128, 128, k // 128, 128).abs().amax((1, 3)) / 448).clamp_min(1e-12)  # [N/128, K/128]
        sa_full, sb_full = sa.repeat_interleave(128, 1), sb.repeat_interleave(128, 0).repeat_interleave(128, 1)
        a8, b8 = (a / sa_full).to(e4m3), (b / sb_full).to(e4m3)
        reference = (a8.float() * sa_full) @ (b8.float() * sb_full).T
        s.update(torch=torch.__version__, quantization_error=_errors(reference, a @ b.T))
    if not s["ok"]:
        return answers
    scale_a_m_major = sa.t().contiguous().t()  # [M, K/128] with stride (1, M)
    variants = {
        "scale_a M-major, scale_b = [N/128,K/128]ᵀ": (scale_a_m_major, sb.t()),
        "scale_a row-major, scale_b = [N/128,K/128]ᵀ": (sa, sb.t()),
        "scale_a M-major, scale_b [K/128,N/128] contiguous": (scale_a_m_major, sb.t().contiguous()),
        "both contiguous": (sa, sb.t().contiguous()),
    }
    for label, (scale_a, scale_b) in variants.items():
        with rec.step(f"scaled_mm blockwise, {label}") as s:
            s["scale_a"] = {"shape": list(scale_a.shape), "stride": list(scale_a.stride())}
            s["scale_b"] = {"shape": list(scale_b.shape), "stride": list(scale_b.stride())}

            def call(scale_a=scale_a, scale_b=scale_b):
                return torch._scaled_mm(a8, b8.t(), scale_a, scale_b, out_dtype=torch.bfloat16)

            s.update(_errors(call().float(), reference), ms=_bench_ms(call))
            s["tflops"] = round(2 * m * n * k / s["ms"] / 1e9, 1)
            answers.append(f"_scaled_mm ({label}) {s['ms']} ms rel {s['rel_l2']:.2e}")
    with rec.step("scaled_mm v2 (torch.nn.functional.scaled_mm)") as s:
        import inspect

        scaled_mm = getattr(torch.nn.functional, "scaled_mm", None)
        if scaled_mm is None:
            raise ProbeError("torch.nn.functional has no scaled_mm")
        s["signature"] = str(inspect.signature(scaled_mm))
        recipe = torch.nn.functional.ScalingType

        def call_v2():
            return scaled_mm(a8, b8.t(), scale_a_m_major, recipe.BlockWise1x128, sb.t(), recipe.BlockWise128x128,
                             output_dtype=torch.bfloat16)  # fmt: skip

        s.update(_errors(call_v2().float(), reference), ms=_bench_ms(call_v2))
    with rec.step("controls: tensor-wise fp8 and bf16") as s:
        one = torch.tensor(1.0, device="cuda")
        t8a, t8b, ab, bb = a.to(e4m3), b.to(e4m3), a.bfloat16(), b.bfloat16()
        s["tensorwise_ms"] = _bench_ms(lambda: torch._scaled_mm(t8a, t8b.t(), one, one, out_dtype=torch.bfloat16))
        s["bf16_matmul_ms"] = _bench_ms(lambda: ab @ bb.T)
    return answers


def _cudnn_fp8_sdpa(batch: int, heads: int, seq: int, dim: int, causal: bool) -> dict[str, Any]:
    """cudnn-frontend's fp8 SDPA forward with per-tensor descales (scale = 448/amax); its time and its error on
    four heads of batch 0 against fp32 attention on the dequantized inputs."""
    import cudnn
    import torch

    e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    torch.manual_seed(1)
    shape, stride = [batch, heads, seq, dim], [heads * seq * dim, seq * dim, dim, 1]
    bf = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    descales = [(t.abs().max().float() / 448).reshape(1, 1, 1, 1) for t in bf]
    q8, k8, v8 = [(t.float() / d).to(torch.float8_e4m3fn) for t, d in zip(bf, descales, strict=True)]
    del bf
    scale_s = torch.full((1, 1, 1, 1), 448.0, device="cuda")  # softmax probabilities lie in [0, 1]
    descale_s = 1 / scale_s
    scale_o = (448 / (v8.float().abs().max() * descales[2])).reshape(1, 1, 1, 1)  # |O| ≤ max |V|
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle)
    q, k, v = (graph.tensor(name=n, dim=shape, stride=stride, data_type=e4m3) for n in ("q", "k", "v"))
    scalars = {
        n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32)
        for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    }
    common = dict(q=q, k=k, v=v, **scalars, attn_scale=1 / math.sqrt(dim), use_causal_mask=causal)
    try:
        o, stats, amax_s, amax_o = graph.sdpa_fp8(**common, generate_stats=True)
    except TypeError:
        o, stats, amax_s, amax_o = graph.sdpa_fp8(**common, is_inference=False)
    o.set_output(True).set_dim(shape).set_stride(stride).set_data_type(e4m3)
    stats.set_output(True).set_dim([batch, heads, seq, 1]).set_stride([heads * seq, seq, 1, 1]).set_data_type(fp32)
    for amax in (amax_s, amax_o):
        amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    out = torch.empty(shape, device="cuda", dtype=torch.float8_e4m3fn)
    lse = torch.empty(batch, heads, seq, 1, device="cuda")
    amax_out = [torch.empty(1, 1, 1, 1, device="cuda") for _ in range(2)]
    workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = {
        q: q8,
        k: k8,
        v: v8,
        scalars["descale_q"]: descales[0],
        scalars["descale_k"]: descales[1],
        scalars["descale_v"]: descales[2],
        scalars["descale_s"]: descale_s,
        scalars["scale_s"]: scale_s,
        scalars["scale_o"]: scale_o,
        o: out,
        stats: lse,
        amax_s: amax_out[0],
        amax_o: amax_out[1],
    }
    ms = _bench_ms(lambda: graph.execute(pack, workspace, handle=handle), reps=10)
    heads_checked = 4
    qd, kd, vd = [t[0, :heads_checked].float() * d.item() for t, d in zip((q8, k8, v8), descales, strict=True)]
    scores = qd @ kd.transpose(-1, -2) / math.sqrt(dim)
    if causal:
        scores.masked_fill_(torch.ones(seq, seq, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    ref_lse = torch.logsumexp(scores, -1)
    ref = torch.softmax(scores, -1) @ vd
    got = out[0, :heads_checked].float() / scale_o.item()
    close = ((got - ref).abs() <= 1e-2 + 1e-2 * ref.abs()).float().mean()
    flops = 4 * batch * heads * seq * seq * dim // (2 if causal else 1)
    return {
        "ms": ms,
        "tflops": round(flops / ms / 1e9, 1),
        **_errors(got, ref),
        "within_1e-2": float(close),
        "lse_rel_l2": float((lse[0, :heads_checked, :, 0] - ref_lse).norm() / ref_lse.norm()),
        "amax_s": float(amax_out[0]),
        "amax_o": float(amax_out[1]),
        "workspace_bytes": workspace.numel(),
    }


class HangChild:
    """The hang kernel launched by a child process (`--launch`); its output is read on a thread, so waiting
    for 'launched' has a deadline. Killed (by its pid) on exit from the with-block, whatever happened."""

    def __init__(self, cubin: Path, env: dict[str, str]):
        cmd = [sys.executable, "-m", "tools.dev.probe_h200", "--launch", cubin, "--kernel", HANG_KERNEL, "--grid",
               "2", "--block", "128", "--words", "1024"]  # fmt: skip
        self.proc = procs.spawn(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO_ROOT
        )
        self.lines: list[str] = []
        self.launched = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line.rstrip())
            if line.startswith("launched"):
                self.launched.set()

    def __enter__(self) -> HangChild:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.reader.join(5)

    def wait_launched(self, timeout_s: float) -> None:
        if not self.launched.wait(timeout_s):
            raise ProbeError(f"the child did not launch within {timeout_s:.0f} s: {self.lines[-10:]}")
        time.sleep(1.0)  # let the warps reach the wait loop


# What cuda-gdb shows once attached or once a core is open: the kernels, every thread's PC and line, the warps
# of the focused SM, the focused thread's frame and instructions.
_CUDA_GDB_VIEW = ("info cuda kernels", "info cuda blocks", "info cuda threads", "info cuda warps", "bt", "x/6i $pc",
                  "info line *$pc")  # fmt: skip


def _cuda_gdb(cuda_gdb: str, target: list[str], source_dir: Path, timeout_s: float) -> dict[str, Any]:
    """cuda-gdb in batch mode: `target` (attach or open a core), then the views of the kernels and warps."""
    cmd = [cuda_gdb, "-q", "-nx", "-batch", "-iex", "set pagination off", "-iex", f"directory {source_dir}", *target]
    for view in _CUDA_GDB_VIEW:
        cmd += ["-ex", view]
    run = tool(cmd, timeout_s)
    text = run["stdout"] + run["stderr"]
    return {
        "run": run,
        "ptx_lines": list(dict.fromkeys(line.strip() for line in text.splitlines() if "kernel.ptx" in line))[:20],
    }


def probe_hang_located(rec: Record, args: argparse.Namespace) -> str:
    """Issue 28: where do the warps of a kernel hung on an mbarrier wait (expect_tx 1024, 512 delivered) stand,
    read (a) by cuda-gdb attached to the hung process and (b) from a GPU core dump the user triggers
    (CUDA_ENABLE_USER_TRIGGERED_COREDUMP, its pipe) opened by cuda-gdb: which commands list the warps with their
    PCs and source lines (through -lineinfo), and how long each route takes? Each step is bounded by 20 s and
    the hung process is killed after each."""
    cuda_gdb = shutil.which("cuda-gdb") or next(iter(glob.glob("/usr/local/cuda/bin/cuda-gdb")), None)
    answers = []
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("probe")) as tmp:
        folder = Path(tmp)
        cubin = folder / "hang.cubin"
        with rec.step("assemble") as s:
            (folder / "kernel.ptx").write_text(HANG_PTX)  # the line table names kernel.ptx: cuda-gdb lists it
            cubin.write_bytes(assemble(HANG_PTX, line_info=True))
            s["wait_line"] = next(i for i, line in enumerate(HANG_PTX.splitlines(), 1) if "mbarrier.try_wait" in line)
        with rec.step("cuda_gdb") as s:
            s.update(path=cuda_gdb, kernel_release=platform.release())
            if cuda_gdb is None:
                raise ProbeError("cuda-gdb is not installed here")
            s.update(brief(tool([cuda_gdb, "--version"], 20)))
        if cuda_gdb is None or not cubin.is_file():
            return "cuda-gdb or the kernel missing"
        with rec.step("attach") as s, HangChild(cubin, child_env()) as child:
            child.wait_launched(20)
            s["pid"] = child.proc.pid
            result = _cuda_gdb(cuda_gdb, ["-p", str(child.proc.pid), "-ex", "info cuda devices"], folder, 20)
            s["raw"] = rec.raw("attach.txt", result["run"]["stdout"] + result["run"]["stderr"])
            s.update(
                seconds_cuda_gdb=result["run"]["seconds"],
                rc=result["run"]["rc"],
                ptx_lines=result["ptx_lines"],
                output=excerpt(result["run"]["stdout"] + result["run"]["stderr"], 6000),
                child_output=child.lines[-10:],
            )
            answers.append(f"attach: {len(result['ptx_lines'])} kernel.ptx lines in {result['run']['seconds']} s")
            if not result["ptx_lines"]:
                raise ProbeError("cuda-gdb named no line of kernel.ptx")
        core = folder / "core"
        dump_env = child_env(
            CUDA_ENABLE_USER_TRIGGERED_COREDUMP="1",
            CUDA_COREDUMP_PIPE=str(folder / "pipe.%p"),
            CUDA_COREDUMP_FILE=str(core) + ".%p",
            CUDA_COREDUMP_SHOW_PROGRESS="1",
            CUDA_COREDUMP_GENERATION_FLAGS="skip_nonrelocated_elf_images,skip_global_memory,"
            "skip_shared_memory,skip_local_memory,skip_constbank_memory",
        )
        with rec.step("core_dump") as s, HangChild(cubin, dump_env) as child:
            child.wait_launched(20)
            pid = child.proc.pid
            pipe = folder / f"pipe.{pid}"
            s["pipe_exists"] = pipe.exists()
            s["fds"] = _pipe_fds(pid)
            start = time.perf_counter()
            s["written_bytes"] = _trigger(pipe if pipe.exists() else None, 10)
            dump = Path(f"{core}.{pid}")
            s["dump_seconds"] = _wait_for_file(dump, child.proc, 20)
            s["dump_bytes"] = dump.stat().st_size if dump.is_file() else None
            s["child_output"] = child.lines[-15:]
            if not dump.is_file():
                raise ProbeError(f"no core dump appeared ({time.perf_counter() - start:.1f} s)")
        dumps = sorted(glob.glob(f"{core}.*"))
        if dumps:
            with rec.step("core_dump_read") as s:
                dump = Path(dumps[0])
                result = _cuda_gdb(cuda_gdb, ["-ex", f"target cudacore {dump}"], folder, 20)
                s["raw"] = rec.raw("cudacore.txt", result["run"]["stdout"] + result["run"]["stderr"])
                s.update(
                    seconds_cuda_gdb=result["run"]["seconds"],
                    rc=result["run"]["rc"],
                    ptx_lines=result["ptx_lines"],
                    output=excerpt(result["run"]["stdout"] + result["run"]["stderr"], 6000),
                )
                answers.append(f"core dump: {len(result['ptx_lines'])} kernel.ptx lines")
                if not result["ptx_lines"]:
                    raise ProbeError("cuda-gdb named no line of kernel.ptx")
    return "; ".join(answers) or "neither route ran"


def _pipe_fds(pid: int) -> list[str]:
    """Where the process's file descriptors point, those that look like the core-dump pipe."""
    out = []
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if "pipe" in target or "coredump" in target:
                out.append(target)
    return out


def _trigger(pipe: Path | None, timeout_s: float) -> int:
    """Write 1 MiB of zeros into the core-dump pipe without ever blocking (a pipe holds less: the driver reads
    as we write); returns the bytes written."""
    if pipe is None:
        raise ProbeError("the core-dump pipe does not exist")
    fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    written, block, deadline = 0, b"\0" * 65536, time.monotonic() + timeout_s
    try:
        while written < 1 << 20 and time.monotonic() < deadline:
            try:
                written += os.write(fd, block)
            except BlockingIOError:
                time.sleep(0.05)
            except BrokenPipeError:
                break
    finally:
        os.close(fd)
    return written


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float) -> float | None:
    """Seconds until `path` exists and stops growing (or the process ended), None if it never appeared."""
    start, size = time.monotonic(), -1
    while time.monotonic() - start < timeout_s:
        if path.is_file():
            now = path.stat().st_size
            if now == size and now > 0:
                return round(time.monotonic() - start, 2)
            size = now
        elif proc.poll() is not None:
            break
        time.sleep(0.5)
    return round(time.monotonic() - start, 2) if path.is_file() else None


# name → (probe, its own limit in seconds)
PROBES: dict[str, tuple[Callable[[Record, argparse.Namespace], str], float]] = {
    "ptxas_codes": (probe_ptxas_codes, 60),
    "cupti_counts": (probe_cupti_counts, 130),
    "cupti_durations": (probe_cupti_durations, 60),
    "ncu_source": (probe_ncu_source, 90),
    "fp8_baselines": (probe_fp8_baselines, 100),
    "hang_located": (probe_hang_located, 100),
}


# -------------------------------------------------------------------------------------- the orchestrator


def machine_facts() -> dict[str, Any]:
    """What the summary says about the machine: kernel and runtime, GPU, Python packages, the tools found."""
    from importlib.metadata import PackageNotFoundError, version

    from tools.gpu.ncu import find_ncu

    release = platform.release()
    runtime = "gVisor" if release.startswith("4.4.0") else "Firecracker" if "-fc-" in release else "unknown"
    packages = {}
    for name in ("torch", "triton", "cuda-bindings", "cupti-python", "nvidia-cuda-cupti", "nvidia-cudnn-cu13",
                 "nvidia-cudnn-frontend", "nvidia-cuda-nvcc", "pydantic"):  # fmt: skip
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    smi = tool(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"], 15)
    return {
        "kernel_release": release,
        "runtime": runtime,
        "python": sys.version.split()[0],
        "packages": packages,
        "nvidia_smi": smi["stdout"].strip() or smi["stderr"].strip()[:300],
        "ncu": str(find_ncu()),
        "compute_sanitizer": shutil.which("compute-sanitizer"),
        "cuda_gdb": shutil.which("cuda-gdb"),
        "ptxas": ptxas_binaries(),
        "libcupti": libcupti_candidates(),
    }


def probe_limit(name: str, remaining_s: float, later: int) -> float:
    """A probe's time: its own limit, within what the budget has left once every later probe is kept 20 s
    and the finish its share."""
    return max(0.0, min(PROBES[name][1], remaining_s - FINISH_S - 20 * later))


def run_probe(name: str, out: Path, args: argparse.Namespace, limit_s: float) -> dict[str, Any]:
    """The probe in a child process under `limit_s`; its JSON (what it finished, if it was stopped) with how
    the child ended."""
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tools.dev.probe_h200", "--child", name, "--out", out, "--gemm-m", str(args.gemm_m)]
    if args.cupti134_site:
        cmd += ["--cupti134-site", args.cupti134_site]
    run = tool(cmd, limit_s, env=child_env(), cwd=REPO_ROOT)
    data = json.loads(path.read_text()) if path.is_file() else {"probe": name, "status": "error", "steps": {}}
    if run.get("timed_out"):
        data["status"] = "timeout"
    elif data.get("status") == "running":
        data["status"] = "error"
    data["child"] = {
        "rc": run["rc"],
        "seconds": run["seconds"],
        "limit_s": round(limit_s, 1),
        "output_tail": excerpt(run["stdout"] + run["stderr"], 2000),
    }
    if not data.get("answer") and data["status"] in ("timeout", "error"):
        last = next(reversed(data["steps"].items()), None) if data["steps"] else None
        tail = (run["stdout"] + run["stderr"]).strip().splitlines()
        data["answer"] = f"stopped in step {last[0]!r}" if last else (tail[-1][:200] if tail else "no output")
    path.write_text(json.dumps(data, indent=1, default=str))
    return data


def summary_table(results: dict[str, dict[str, Any]], width: int = 160) -> str:
    """The table printed last: one row per probe (status, seconds, the answer cut to the width)."""
    rows = [f"{'probe':<16} {'status':<8} {'seconds':>8}  answer"]
    for name, r in results.items():
        seconds = r.get("child", {}).get("seconds")
        answer = str(r.get("answer") or "").replace("\n", " ")
        room = max(20, width - 36)
        if len(answer) > room:
            answer = answer[: room - 1] + "…"
        rows.append(f"{name:<16} {r.get('status', '-'):<8} {seconds if seconds is not None else '-':>8}  {answer}")
    return "\n".join(rows)


def pack_raw(out: Path) -> Path | None:
    """raw/ → raw.tar.gz (the files that come back from the GPU machine are at most 8)."""
    folder = out / RAW
    if not folder.is_dir():
        return None
    archive = out / "raw.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=RAW)
    shutil.rmtree(folder)
    return archive


def orchestrate(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "budget_s": args.budget_s}
    try:
        summary["machine"] = machine_facts()
    except Exception as e:
        summary["machine"] = {"error": f"{type(e).__name__}: {e}"}
    results: dict[str, dict[str, Any]] = {}
    names = args.only
    for i, name in enumerate(names):
        limit = probe_limit(name, args.budget_s - (time.monotonic() - start), len(names) - i - 1)
        if limit < 10:
            results[name] = {"probe": name, "status": "skipped", "answer": "no time left in the budget", "steps": {}}
        else:
            print(f"[{time.monotonic() - start:6.1f} s] {name} (limit {limit:.0f} s)", flush=True)
            results[name] = run_probe(name, out, args, limit)
        summary["probes"] = {n: {k: r.get(k) for k in ("status", "answer", "child")} for n, r in results.items()}
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    summary["seconds"] = round(time.monotonic() - start, 1)
    archive = pack_raw(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    machine = summary["machine"]
    print()
    print(f"machine: {machine.get('kernel_release')} ({machine.get('runtime')}), {machine.get('nvidia_smi')}")
    print(summary_table(results))
    print(
        f"\n{summary['seconds']} s; results: {out}/summary.json, {out}/<probe>.json"
        + (f", {archive}" if archive else "")
    )
    return 0


# ------------------------------------------------------------------------------------ the child entries


def run_child(args: argparse.Namespace) -> int:
    probe, _ = PROBES[args.child]
    rec = Record(args.out, args.child, (probe.__doc__ or "").strip())
    try:
        answer = probe(rec, args)
    except Exception as e:  # the probe's own code outside its steps: recorded like a step's failure
        rec.data["steps"]["(probe)"] = {
            "ok": False,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-2000:],
        }
        answer = f"failed: {type(e).__name__}: {e}"
    rec.finish(answer)
    return 0


def run_route(args: argparse.Namespace) -> int:
    try:
        result = {"worked": True, **ROUTES[args.route](args.bundle)}
    except Exception as e:
        result = {"worked": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    args.result.write_text(json.dumps(result, indent=1, default=str))
    return 0


def launch_cubin(args: argparse.Namespace) -> int:
    """Launch one kernel whose single parameter is a zeroed buffer of `words` u32, then wait for it: the target
    of ncu (ncu_source) and of cuda-gdb (hang_located, where the wait never ends)."""
    from cuda.bindings import driver as cu

    from tools.gpu import driver

    procs.die_with_parent(os.getppid())
    driver.call(cu.cuInit, 0)
    driver.call(cu.cuCtxSetCurrent, driver.call(cu.cuDevicePrimaryCtxRetain, driver.call(cu.cuDeviceGet, 0)))
    buffer = int(driver.call(cu.cuMemAlloc, args.words * 4))
    driver.call(cu.cuMemsetD32, buffer, 0, args.words)
    function = driver.call(cu.cuModuleGetFunction, driver.load_module(args.launch.read_bytes()), args.kernel.encode())
    driver.call(cu.cuLaunchKernel, function, args.grid, 1, 1, args.block, 1, 1, 0, cu.CUstream(0),
                ((buffer,), (ctypes.c_void_p,)), 0)  # fmt: skip
    print(f"launched {args.kernel} in pid {os.getpid()}", flush=True)
    driver.synchronize()
    print("finished", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.dev.probe_h200", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--only", default=",".join(PROBES), help="comma-separated probes, run in the order given")
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall time for all probes together")
    parser.add_argument("--gemm-m", type=int, default=1024, help="M of the GEMM that cupti_counts profiles")
    parser.add_argument("--cupti134-site", default="", help="a --target folder holding cupti-python 13.4 (PM sampling)")
    internal = parser.add_argument_group("internal (the probes' own child processes)")
    internal.add_argument("--child", choices=list(PROBES), help=argparse.SUPPRESS)
    internal.add_argument("--route", choices=list(ROUTES), help=argparse.SUPPRESS)
    internal.add_argument("--bundle", type=Path, help=argparse.SUPPRESS)
    internal.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    internal.add_argument("--launch", type=Path, help=argparse.SUPPRESS)
    internal.add_argument("--kernel", help=argparse.SUPPRESS)
    internal.add_argument("--grid", type=int, default=1, help=argparse.SUPPRESS)
    internal.add_argument("--block", type=int, default=32, help=argparse.SUPPRESS)
    internal.add_argument("--words", type=int, default=1024, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in args.only if n not in PROBES]
    if unknown or not args.only:
        parser.error(f"unknown probe(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(PROBES)}")
    if args.route and (args.bundle is None or args.result is None):
        parser.error("--route needs --bundle and --result")
    if args.launch and not args.kernel:
        parser.error("--launch needs --kernel")
    if args.budget_s <= 0:
        parser.error("--budget-s must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    if args.route:
        return run_route(args)
    if args.launch:
        return launch_cubin(args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped run still packs what it has
    try:
        return orchestrate(args)
    except KeyboardInterrupt:
        pack_raw(args.out)
        return 130


if __name__ == "__main__":
    sys.exit(main())
