"""Generate the reference answers: PTX + LaunchSpec per task × arch from our Triton kernels, and the hand-written CUDA
attention answers on sm_90a (`cuda_answers.py`, `cuda_bwd_answers.py`) through their own generators.

    python -m tasks.solutions.dev.generate [--arch sm_90a|sm_100a|all] [--tasks T ...] [--check]

For each task and arch: build the launches the config table below names (`tasks/solutions/dev/kernels/`),
compile each kernel offline with `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90|100, 32))`
(no GPU needed) with TRITON_PTXAS_PATH set to our ptxas wheel so that Triton picks a PTX .version that
ptxas 13.0 accepts, join the kernels' PTX into one module, and write tasks/solutions/<arch>/<task>.md:
a provenance note, the ```ptx block and the ```json LaunchSpec (args in .entry order, following
Triton's ABI). `--check` then runs each answer through tools.pipeline.evaluate_answer (compile, SASS,
ABI; the GPU stages are skipped here) and prints the target groups found in the SASS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tasks.catalog import CORE, TASKS, get_task
from tasks.schema import Arch, Task
from tasks.solutions import ROOT, answer_key, answer_path, answered_by
from tasks.solutions.dev import cuda_answers, cuda_bwd_answers
from tasks.solutions.dev.kernels import attention_bwd, attention_fwd, fp8_attention, fp8_gemm, gemm
from tasks.solutions.dev.kernels.attention_bwd import AttnBwdConfig
from tasks.solutions.dev.kernels.attention_fwd import AttnFwdConfig
from tasks.solutions.dev.kernels.fp8_gemm import Fp8GemmConfig
from tasks.solutions.dev.kernels.gemm import GemmConfig
from tasks.solutions.dev.kernels.launch import TRITON_DTYPES, Desc, KernelLaunch, Program, Ptr, Scalar

# ------------------------------------------------------------------------------------ config table
# One config per kind of task, the same on both archs: chosen for the H200 (132 SMs, 227 KiB of shared
# memory per block); sm_100a answers are compiled only (no B200 to tune on) and reuse the Hopper tiles,
# which Triton lowers to tcgen05 MMAs with TMEM accumulators. `tune_on_gpu.py` measures candidates.
GEMM = GemmConfig(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4, persistent=True,
                  epilogue_split=True)  # fmt: skip
FWD = AttnFwdConfig(block_m=128, block_n=128, num_warps=8, num_stages=3)
BWD = AttnBwdConfig(kv_block_n=128, kv_block_m=64, kv_warps=8, kv_stages=3, q_block_m=128, q_block_n=64,
                    q_warps=8, q_stages=3)  # fmt: skip
# 128-row tiles, one 128-wide K block (one scale) per step, 4 stages of 2 × 16 KiB.
FP8_GEMM = Fp8GemmConfig(block_m=128, group_m=8, num_warps=8, num_stages=4)
# D=256: 64-key steps and 2 stages, so that Q and the K/V ring fit in shared memory (64 + 2·2·32 KiB).
FWD_D256 = AttnFwdConfig(block_m=128, block_n=64, num_warps=8, num_stages=2)
# D=96 runs a head dim padded to 128 (TMA zero-fills the columns past 96); 128×64 steps spill there.
BWD_D96 = AttnBwdConfig(kv_block_n=128, kv_block_m=32, kv_warps=8, kv_stages=3, q_block_m=128, q_block_n=64,
                        q_warps=8, q_stages=2)  # fmt: skip


def config_for(task: Task) -> Any:
    """The table's config for `task`."""
    if task.family == "gemm":
        return GEMM
    if task.family == "fp8_gemm":
        return FP8_GEMM
    if task.family in ("attention_fwd", "fp8_attention_fwd"):
        return FWD_D256 if task.dims["D"] == 256 else FWD
    return BWD_D96 if task.dims["D"] == 96 else BWD


KERNEL_MODULES: dict[str, ModuleType] = {"gemm": gemm, "attention_fwd": attention_fwd, "attention_bwd": attention_bwd,
                                          "fp8_gemm": fp8_gemm, "fp8_attention_fwd": fp8_attention}  # fmt: skip
SWIZZLE = {0: "none", 1: "32B", 2: "64B", 3: "128B"}  # CUtensorMapSwizzle, as Triton's tensordesc_meta gives it


def configured_tasks() -> list[str]:
    """One task per answer file the table configures (every bf16 definition; the GEMMs share one): the core task
    where the file serves one, else the definition's first workload. The answer serves all of its tasks."""
    chosen: dict[str, str] = {}
    for name, task in TASKS.items():
        key = answer_key(task)
        if task.family in KERNEL_MODULES and (key not in chosen or name in CORE):
            chosen[key] = name
    return list(chosen.values())


def task_for(name: str) -> Task:
    """The task a --tasks item names: a task name, or an answer file's key (a definition, e.g. mha_with_lse_d256)."""
    served = answered_by(name)
    return TASKS[served[0]] if served else get_task(name)


def kernel_module(task: Task) -> ModuleType:
    return KERNEL_MODULES[task.family]


def program_for(task: Task, arch: Arch, config: Any = None) -> Program:
    """The launches and scratch of `task` on `arch` under `config` (default: the table's)."""
    return kernel_module(task).program(task, config if config is not None else config_for(task), arch)


# ------------------------------------------------------------------------------------- compiling


def _setup_toolchain() -> str:
    """Point Triton at our ptxas (its PTX .version follows the ptxas it finds) and drop line info."""
    from tools.toolchain import find_tool

    ptxas = find_tool("ptxas")
    os.environ["TRITON_PTXAS_PATH"] = str(ptxas.path)
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # no .loc/.file/debug sections: smaller, and modules join cleanly
    return ptxas.version


def dtype_of(name: str, task: Task, program: Program) -> str:
    """A task tensor's or scratch buffer's dtype name."""
    for s in program.scratch:
        if s.name == name:
            return s.dtype
    return task.tensor(name).dtype


def signature(launch: KernelLaunch, task: Task, program: Program) -> tuple[dict[str, str], dict]:
    """Triton's compile signature and attributes (pointers 16-byte aligned, as the JIT would assume)."""
    sig: dict[str, str] = {}
    attrs: dict = {}
    for i, name in enumerate(launch.fn.arg_names):
        if name in launch.constexprs:
            sig[name] = "constexpr"
            continue
        if name not in launch.params:  # a defaulted constexpr left out (check_names allows it): Triton's default
            continue
        p = launch.params[name]
        if isinstance(p, Desc):
            sig[name] = f"tensordesc<{TRITON_DTYPES[dtype_of(p.tensor, task, program)]}[{','.join(map(str, p.block))}]>"
        elif isinstance(p, Ptr):
            sig[name] = "*" + TRITON_DTYPES[dtype_of(p.tensor, task, program)]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = p.type
    return sig, attrs


def compile_launch(launch: KernelLaunch, task: Task, arch: Arch, program: Program):
    """Triton's CompiledKernel for one launch, for `arch`, whatever GPU (if any) this machine has."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    launch.check_names()
    sig, attrs = signature(launch, task, program)
    src = ASTSource(launch.fn, sig, dict(launch.constexprs), attrs)
    major, minor = arch.compute_capability
    target = GPUTarget("cuda", major * 10 + minor, 32)
    return compile(src, target=target, options={"num_warps": launch.num_warps, "num_stages": launch.num_stages})


def launch_args(launch: KernelLaunch, tensordesc_meta: list[dict]) -> list[dict]:
    """LaunchSpec args in Triton's .entry order: per descriptor a tensor map, its shape (u32) and strides
    (u64); pointers; scalars; then the global and profile scratch pointers, passed as 0."""
    args: list[dict] = []
    metas = iter(tensordesc_meta)
    for name, p in launch.params.items():
        if isinstance(p, Desc):
            meta = next(metas)
            if meta.get("fp4_padded"):
                raise ValueError(f"{launch.name}.{name}: fp4-padded descriptors are not supported")
            args.append({"tensor_map": p.tensor, "shape": list(p.shape), "box": list(meta["block_size"]),
                         "swizzle": SWIZZLE[meta["swizzle"]], "l2_promotion": "128B"})  # fmt: skip
            args += [{"scalar": e, "type": "u32"} for e in p.shape]
            args += [{"scalar": e, "type": "u64"} for e in p.strides]
        elif isinstance(p, Ptr):
            args.append({"tensor": p.tensor})
        elif isinstance(p, Scalar):
            args.append({"scalar": p.expr, "type": "f32" if p.type == "fp32" else "s32"})
    if next(metas, None) is not None:
        raise ValueError(f"{launch.name}: more tensor descriptors in the metadata than in the launch")
    return [*args, {"scalar": 0, "type": "u64"}, {"scalar": 0, "type": "u64"}]


@dataclass
class Compiled:
    launch: KernelLaunch
    ptx: str
    shared: int
    tensordesc_meta: list[dict]
    scratch: tuple[int, int]  # global, profile scratch sizes (must be 0: we pass null pointers)


_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b.*$", re.M)
_EXTERN_SMEM = re.compile(r"^\s*\.extern \.shared \.align \d+ \.b8 global_smem\[\];\s*$", re.M)
_COMMENT_LINE = re.compile(r"^[ \t]*//[^\n]*\n", re.M)  # LLVM's block and inline-asm markers: ~13% of the text
_GLOBAL_DEF = re.compile(r"^\.global\s[^;]*?([\w$]+)\s*(?:\[\d*\])?\s*(?:=[^;]*)?;\s*$", re.M)


def join_ptx(modules: list[str]) -> str:
    """One PTX module from several of Triton's (same .version/.target): one header, one declaration of the
    dynamic shared memory every kernel addresses as `global_smem`, then each module's body without its
    whole-line comments. Module-scope
    `.global` definitions that repeat word for word (libdevice's `__CUDA_FTZ` string) are kept once; a
    name defined differently by two modules is renamed in the later one."""
    headers = [tuple(m.group(0).strip() for m in _HEADER.finditer(text)) for text in modules]
    if len(set(headers)) != 1:
        raise ValueError(f"the kernels' PTX headers differ: {headers}")
    extern = _EXTERN_SMEM.search(modules[0])
    defined: dict[str, str] = {}  # global name -> its definition line
    bodies = []
    for index, text in enumerate(modules):
        body = _COMMENT_LINE.sub("", _EXTERN_SMEM.sub("", _HEADER.sub("", text)))
        for m in list(_GLOBAL_DEF.finditer(body)):
            line, name = m.group(0).strip(), m.group(1)
            if defined.get(name) == line:
                body = body.replace(m.group(0), "", 1)
            elif name in defined:
                body = re.sub(rf"(?<![\w$]){re.escape(name)}(?![\w$])", f"{name}_{index}", body)
                defined[f"{name}_{index}"] = line.replace(name, f"{name}_{index}", 1)
            else:
                defined[name] = line
        bodies.append(body.strip("\n"))
    parts = ["//", "// Generated by tasks/solutions/dev/generate.py from Triton kernels (see the answer's notes)", "//"]
    parts += list(headers[0])
    if extern:
        parts.append(extern.group(0).strip())
    return "\n".join(parts) + "\n\n" + "\n\n".join(bodies) + "\n"


def build_answer(task: Task, arch: Arch, config: Any = None, flaw: str | None = None) -> tuple[str, list[Compiled]]:
    """The answer's Markdown for `task` on `arch`, and what each kernel compiled to; `flaw`: a deliberate bug the
    kernel module plants (attention_fwd.FLAWS), for a broken fixture."""
    import triton

    ptxas_version = _setup_toolchain()
    cfg = config if config is not None else config_for(task)
    planted = {"flaw": flaw} if flaw is not None else {}
    program = kernel_module(task).program(task, cfg, arch, **planted)
    compiled = []
    for launch in program.launches:
        k = compile_launch(launch, task, arch, program)
        md = k.metadata
        if md.global_scratch_size or md.profile_scratch_size:
            raise ValueError(f"{launch.name} needs Triton scratch memory; the LaunchSpec passes null pointers")
        compiled.append(Compiled(launch, k.asm["ptx"], md.shared, list(md.tensordesc_meta or []),
                                 (md.global_scratch_size, md.profile_scratch_size)))  # fmt: skip
    spec = {
        "launches": [
            {
                "kernel": c.launch.name,
                "grid": list(c.launch.grid),
                "block": [32 * c.launch.num_warps, 1, 1],
                "shared_bytes": c.shared,
                "args": launch_args(c.launch, c.tensordesc_meta),
            }
            for c in compiled
        ]
    }
    if program.scratch:
        spec["scratch"] = [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape), "init": "zero"}
                           for b in program.scratch]  # fmt: skip
    ptx = join_ptx([c.ptx for c in compiled])
    kernel_files = sorted({Path(sys.modules[c.launch.fn.fn.__module__].__file__).name for c in compiled})
    rows = "\n".join(
        f"| `{c.launch.name}` | {', '.join(f'{k}={v}' for k, v in c.launch.constexprs.items())} | "
        f"{c.launch.num_warps} | {c.launch.num_stages} | {c.shared} |"
        for c in compiled
    )
    cc = "".join(map(str, arch.compute_capability))
    scratch_note = "".join(
        f"\nScratch: `{b.name}` {b.dtype} [{', '.join(b.shape)}], zeroed before each run." for b in program.scratch
    )
    key = answer_key(task)
    note = f"""# Reference solution: {key} on {arch}

Generated by `python -m tasks.solutions.dev.generate --arch {arch} --tasks {key}` from our own Triton
kernels in `tasks/solutions/dev/kernels/{", ".join(kernel_files)}`, compiled offline by Triton {triton.__version__}
(`triton.compile(ASTSource(...), target=GPUTarget("cuda", {cc}, 32))`,
line info off, ptxas {ptxas_version} for the PTX version). Do not edit by hand: change the kernel or the
config table in `tasks/solutions/dev/generate.py` and regenerate.

Config: `{type(cfg).__name__}({", ".join(f"{k}={v}" for k, v in asdict(cfg).items())})`

| kernel | constexprs | warps | stages | dynamic shared bytes |
| --- | --- | --- | --- | --- |
{rows}

Launch ABI (Triton's): each host tensor descriptor is a 128-byte tensor map (box and swizzle as Triton
chose them, L2 promotion 128B) followed by the view's shape (u32) and strides (u64, outermost first); then
the pointers and scalars; then Triton's global and profile scratch pointers, passed as 0.{scratch_note}
"""
    answer = f"{note}\n```ptx\n{ptx.rstrip()}\n```\n\n```json\n{json.dumps(spec, indent=1)}\n```\n"
    return answer, compiled


# ------------------------------------------------------------------------------------------ checking


def check_answer(task: Task, arch: Arch, answer: str) -> dict:
    """Static evaluation (compile, SASS, ABI) and the target groups found in the SASS."""
    from tools.evaluation import Stage
    from tools.options import EvalOptions
    from tools.pipeline import evaluate_answer

    ev = evaluate_answer(answer, task, arch, EvalOptions(time=False, profile=False))
    sass = ev.stage(Stage.SASS)
    targets = (sass.detail.get("targets") or {}) if sass else {}
    compiled = ev.stage(Stage.COMPILE)
    kernels = (compiled.detail.get("kernels") or []) if compiled else []
    return {
        "status": str(ev.status),
        "message": ev.message if ev.status not in ("unverified", "passed") else "",
        "targets": {g: sorted(t["sass_matches"]) for g, t in targets.items() if t["sass"]},
        "missing": [g for g, t in targets.items() if not t["sass"]],
        "registers": {k["name"]: k["registers"] for k in kernels},
        "spills": {k["name"]: k["spill_stores"] for k in kernels if k["spill_stores"]},
    }


def hand_written(task: Task, arch: Arch) -> str | None:
    """The answer Markdown where a hand-written CUDA kernel serves the task on `arch` (the bf16 attention forwards and
    backwards up to D=128 on sm_90a: faster on the H200 than these Triton kernels), else None."""
    if arch is not Arch.SM_90A:
        return None
    key = answer_key(task)
    if key in cuda_answers.DEFINITIONS:
        return cuda_answers.build_answer(key)
    if key in cuda_bwd_answers.TASKS:
        return cuda_bwd_answers.build_answer(get_task(key))
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="all", help="sm_90a, sm_100a or all (default)")
    parser.add_argument("--tasks", nargs="*", help="task names or answer keys (definitions); default: every one")
    parser.add_argument("--check", action="store_true", help="evaluate each answer statically and list SASS targets")
    args = parser.parse_args(argv)
    archs = list(Arch) if args.arch == "all" else [Arch.resolve(args.arch)]
    names = [task_for(t).name for t in args.tasks] if args.tasks else configured_tasks()
    failed = 0
    for name in names:
        task = get_task(name)
        for arch in archs:
            answer = hand_written(task, arch) or build_answer(task, arch)[0]
            path = answer_path(task.name, arch)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(answer)
            line = f"{arch} {task.name:<22} {path.relative_to(ROOT.parent.parent)} ({len(answer) >> 10} KiB)"
            if args.check:
                report = check_answer(task, arch, answer)
                failed += report["status"] != "unverified" or bool(report["missing"])
                line += f"  {report['status']}  targets: " + "; ".join(
                    f"{g}={','.join(sorted({op.split('.')[0] for op in ops}))}" for g, ops in report["targets"].items()
                )
                if report["missing"]:
                    line += f"  MISSING {report['missing']}"
                if report["spills"]:
                    line += f"  spills {report['spills']}"
                if report["message"]:
                    line += f"\n    {report['message'][:500]}"
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
