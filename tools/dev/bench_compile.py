"""`python -m tools.dev.bench_compile [--lines 3000] [--runs 5] [--save DIR]`: how long the static stages take on a
long kernel. For each arch it writes a ~3,000-line PTX GEMM main loop, fully unrolled (a 4-stage TMA +
mbarrier pipeline feeding wgmma m64n128k16 on sm_90a, tcgen05.mma M=128 N=128 into tensor memory on
sm_100a), then times what the evaluator does with it: ptxas -v to a cubin, and nvdisasm + the opcode
histogram + the target-group search. The kernels come from code, not from a network or a compiler, so
every run measures the same text. Prints one row per arch, medians of the runs."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tasks.catalog import TARGETS
from tasks.schema import Arch
from tools import sass
from tools.assemble import compile_ptx

STAGES = 4
BK = 16  # K per MMA step


def long_kernel(arch: Arch, lines: int = 3000) -> str:
    """A straight-line GEMM kernel of about `lines` lines for `arch` (as many K steps as fit)."""
    write = _hopper if arch is Arch.SM_90A else _blackwell
    short, longer = (write(n).count("\n") for n in (STAGES, 2 * STAGES))
    per_step = (longer - short) / STAGES  # steady state: each step also refills its stage
    return write(STAGES + max(0, int((lines - short) / per_step)))


def _header(arch: str, name: str, steps: int, smem: dict[str, int], what: str) -> list[str]:
    out = [
        "//",
        f"// PTXBench compile benchmark ({arch}): {what}",
        f"// {steps} K steps of {BK}, fully unrolled, through a {STAGES}-stage TMA + mbarrier pipeline.",
        "//",
        ".version 8.6",
        f".target {arch}",
        ".address_size 64",
        "",
    ]
    out += [f".shared .align {1024 if size >= 1024 else 8} .b8 {n}[{size}];" for n, size in smem.items()]
    out += [
        "",
        f".visible .entry {name}(",
        "\t.param .align 64 .b8 a_map[128],",
        "\t.param .align 64 .b8 b_map[128],",
        "\t.param .u64 c_ptr,",
        "\t.param .u32 n_size",
        ")",
        ".reqntid 128",
        "{",
        "\t.reg .pred \t%p<8>;",
        "\t.reg .b32 \t%r<200>;",
        "\t.reg .b64 \t%rd<32>;",
        "\t.reg .f32 \t%f<64>;",
        "\tmov.u32 \t%r0, %tid.x;",
        "\tsetp.eq.u32 \t%p0, %r0, 0;",
        "\tmov.u32 \t%r1, %ctaid.x;",
        "\tshl.b32 \t%r1, %r1, 7;                 // n0",
        "\tmov.u32 \t%r2, %ctaid.y;",
        f"\tshl.b32 \t%r2, %r2, {6 if arch == 'sm_90a' else 7};                 // m0",
        "\tld.param.u32 \t%r3, [n_size];",
        "\tmov.b64 \t%rd0, a_map;",
        "\tcvta.param.u64 \t%rd0, %rd0;",
        "\tmov.b64 \t%rd1, b_map;",
        "\tcvta.param.u64 \t%rd1, %rd1;",
        "\tmov.u32 \t%r4, smem_a;",
        "\tmov.u32 \t%r5, smem_b;",
        "\tmov.u32 \t%r6, full_bar;",
    ]
    return out


def _load(step: int, a_rows: int, b_rows: int) -> list[str]:
    """Thread 0 arms stage `step % STAGES`'s barrier and loads A and B for K step `step`, two 8-column boxes each."""
    stage = step % STAGES
    a_bytes, b_bytes = a_rows * BK * 2, b_rows * BK * 2
    lines = [
        f"\t// load K step {step} into stage {stage}",
        f"\tadd.s32 \t%r10, %r6, {8 * stage};",
        f"\t@%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], {a_bytes + b_bytes};",
        f"\tmov.u32 \t%r11, {step * BK};",
        f"\tmov.u32 \t%r12, {step * BK + 8};",
    ]
    for tensor_map, smem, rows, row0, nbytes in (
        ("%rd0", "%r4", a_rows, "%r2", a_bytes),
        ("%rd1", "%r5", b_rows, "%r1", b_bytes),
    ):
        for half, k in ((0, "%r11"), (1, "%r12")):
            lines += [
                f"\tadd.s32 \t%r13, {smem}, {stage * nbytes + half * rows * 16};",
                f"\t@%p0 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                f"[%r13], [{tensor_map}, {{{k}, {row0}}}], [%r10];",
            ]
    return lines


def _wait(barrier: str, step: int, label: str) -> list[str]:
    return [
        f"$L_{label}_{step}:",
        f"\tmbarrier.try_wait.parity.shared::cta.b64 \t%p1, [{barrier}], {(step // STAGES) % 2};",
        f"\t@!%p1 bra \t$L_{label}_{step};",
    ]


def _descriptors(step: int, a_rows: int, b_rows: int, version: int) -> list[str]:
    """No-swizzle K-major smem descriptors: start, LBO (the second 8-column box), SBO 128 B, [version at bit 46]."""
    stage = step % STAGES
    out = []
    for reg, base, rows in (("%rd4", "%r4", a_rows), ("%rd5", "%r5", b_rows)):
        fixed = ((rows * 16) >> 4 << 16) | (128 >> 4 << 32) | (version << 46)
        out += [
            f"\tadd.s32 \t%r14, {base}, {stage * rows * BK * 2};",
            "\tshr.u32 \t%r14, %r14, 4;",
            f"\tcvt.u64.u32 \t{reg}, %r14;",
            f"\tor.b64 \t{reg}, {reg}, {fixed};",
        ]
    return out


def _k_loop(
    steps: int, a_rows: int, b_rows: int, version: int, issue: Callable[[int], list[str]],
    before_reload: Callable[[int], list[str]],
) -> list[str]:  # fmt: skip
    """The K loop both arches share: STAGES loads in flight; per step, wait for its stage, build the
    descriptors, issue the MMA (`issue`), and load the stage again for step + STAGES."""
    out = []
    for step in range(min(STAGES, steps)):
        out += _load(step, a_rows, b_rows)
    for step in range(steps):
        out += [f"\t// K step {step}", f"\tadd.s32 \t%r15, %r6, {8 * (step % STAGES)};"]
        out += _wait("%r15", step, "full")
        out += _descriptors(step, a_rows, b_rows, version=version)
        out += issue(step)
        if step + STAGES < steps:
            out += before_reload(step) + _load(step + STAGES, a_rows, b_rows)
    return out


def _hopper(steps: int) -> str:
    a_rows, b_rows = 64, 128
    smem = {"smem_a": STAGES * a_rows * BK * 2, "smem_b": STAGES * b_rows * BK * 2, "full_bar": 8 * STAGES}
    out = _header("sm_90a", "bench_wgmma", steps, smem, "64x128 tile, wgmma.mma_async m64n128k16")
    out += [f"\t@%p0 mbarrier.init.shared::cta.b64 [%r6+{8 * s}], 1;" for s in range(STAGES)]
    out += ["\tfence.mbarrier_init.release.cluster;", "\tbar.sync \t0;"]
    out += [f"\tmov.f32 \t%f{i}, 0f00000000;" for i in range(64)]
    acc = ",".join(f"%f{i}" for i in range(64))
    wgmma = [
        "\twgmma.fence.sync.aligned;",
        f"\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{acc}}}, %rd4, %rd5, 1, 1, 1, 0, 0;",
        "\twgmma.commit_group.sync.aligned;",
        "\twgmma.wait_group.sync.aligned 0;",
        "\tbar.sync \t0;",
    ]
    out += _k_loop(steps, a_rows, b_rows, 0, issue=lambda step: wgmma, before_reload=lambda step: [])
    # Epilogue: warp w, lane l holds rows 16w + l/4 (+8) and columns 8i + 2(l%4) (+1) of the tile.
    out += [
        "\tshr.u32 \t%r20, %r0, 5;",
        "\tand.b32 \t%r21, %r0, 31;",
        "\tshr.u32 \t%r22, %r21, 2;",
        "\tmad.lo.s32 \t%r22, %r20, 16, %r22;",
        "\tadd.s32 \t%r22, %r22, %r2;",
        "\tand.b32 \t%r23, %r21, 3;",
        "\tmad.lo.s32 \t%r23, %r23, 2, %r1;",
        "\tmad.lo.s32 \t%r24, %r22, %r3, %r23;",
        "\tld.param.u64 \t%rd10, [c_ptr];",
        "\tcvta.to.global.u64 \t%rd10, %rd10;",
        "\tmul.wide.u32 \t%rd11, %r24, 2;",
        "\tadd.s64 \t%rd12, %rd10, %rd11;",
        "\tmul.wide.u32 \t%rd13, %r3, 16;",
        "\tadd.s64 \t%rd14, %rd12, %rd13;",
    ]
    for i in range(16):
        out += [
            f"\tcvt.rn.bf16x2.f32 \t%r30, %f{4 * i + 1}, %f{4 * i};",
            f"\tcvt.rn.bf16x2.f32 \t%r31, %f{4 * i + 3}, %f{4 * i + 2};",
            f"\tst.global.b32 \t[%rd12+{16 * i}], %r30;",
            f"\tst.global.b32 \t[%rd14+{16 * i}], %r31;",
        ]
    return "\n".join([*out, "\tret;", "}", ""])


def _blackwell(steps: int) -> str:
    a_rows = b_rows = 128
    smem = {"smem_a": STAGES * a_rows * BK * 2, "smem_b": STAGES * b_rows * BK * 2, "full_bar": 8 * STAGES,
            "mma_bar": 8 * STAGES, "tmem_base": 8}  # fmt: skip
    out = _header("sm_100a", "bench_tcgen05", steps, smem, "128x128 tile, tcgen05.mma kind::f16 into TMEM")
    # Instruction descriptor: D f32, A and B bf16, K-major, N = 128 (>> 3 at bit 17), M = 128 (>> 4 at bit 24).
    idesc = (1 << 4) | (1 << 7) | (1 << 10) | ((128 >> 3) << 17) | ((128 >> 4) << 24)
    out += [
        "\tmov.u32 \t%r7, mma_bar;",
        "\tmov.u32 \t%r8, tmem_base;",
        "\tshr.u32 \t%r20, %r0, 5;",
        "\tsetp.ne.u32 \t%p4, %r20, 0;",
        "\t@%p4 bra \t$L_allocated;",
        "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r8], 128;",
        "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;",
        "$L_allocated:",
    ]
    out += [f"\t@%p0 mbarrier.init.shared::cta.b64 [%r6+{8 * s}], 1;" for s in range(STAGES)]
    out += [f"\t@%p0 mbarrier.init.shared::cta.b64 [%r7+{8 * s}], 1;" for s in range(STAGES)]
    out += [
        "\tfence.mbarrier_init.release.cluster;",
        "\ttcgen05.fence::before_thread_sync;",
        "\tbar.sync \t0;",
        "\ttcgen05.fence::after_thread_sync;",
        "\tld.shared.b32 \t%r9, [%r8];",
        f"\tmov.u32 \t%r16, {idesc};",
    ]

    def tcgen05(step: int) -> list[str]:
        return [
            "\ttcgen05.fence::after_thread_sync;",
            f"\t@%p0 tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd4, %rd5, %r16, {int(step > 0)};  // step 0 sets D",
            f"\tadd.s32 \t%r17, %r7, {8 * (step % STAGES)};",
            "\t@%p0 tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r17];",
        ]

    # The stage is reloaded once its MMA has read it.
    out += _k_loop(steps, a_rows, b_rows, 1, issue=tcgen05, before_reload=lambda step: _wait("%r17", step, "mma"))
    last = steps - 1
    out += [f"\tadd.s32 \t%r17, %r7, {8 * (last % STAGES)};", *_wait("%r17", last, "done")]
    out += [
        "\ttcgen05.fence::after_thread_sync;",
        "\tshl.b32 \t%r21, %r20, 21;               // (32 w) << 16: this warp's TMEM lanes",
        "\tadd.s32 \t%r21, %r21, %r9;",
        "\tadd.s32 \t%r22, %r2, %r0;",
        "\tmad.lo.s32 \t%r23, %r22, %r3, %r1;",
        "\tld.param.u64 \t%rd10, [c_ptr];",
        "\tcvta.to.global.u64 \t%rd10, %rd10;",
        "\tmul.wide.u32 \t%rd11, %r23, 2;",
        "\tadd.s64 \t%rd12, %rd10, %rd11;",
    ]
    for chunk in range(4):  # 4 × 32 fp32 columns
        regs = ", ".join(f"%r{100 + i}" for i in range(32))
        out += [
            f"\tadd.s32 \t%r24, %r21, {32 * chunk};",
            f"\ttcgen05.ld.sync.aligned.32x32b.x32.b32 {{{regs}}}, [%r24];",
            "\ttcgen05.wait::ld.sync.aligned;",
        ]
        out += [f"\tcvt.rn.bf16x2.f32 \t%r{140 + j}, %r{101 + 2 * j}, %r{100 + 2 * j};" for j in range(16)]
        out += [
            f"\tst.global.v4.b32 \t[%rd12+{64 * chunk + 16 * v}], {{%r{140 + 4 * v}, %r{141 + 4 * v}, "
            f"%r{142 + 4 * v}, %r{143 + 4 * v}}};"
            for v in range(4)
        ]
    out += [
        "\ttcgen05.fence::before_thread_sync;",
        "\tbar.sync \t0;",
        "\t@%p4 bra \t$L_done;",
        "\ttcgen05.fence::after_thread_sync;",
        "\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r9, 128;",
        "$L_done:",
    ]
    return "\n".join([*out, "\tret;", "}", ""])


def measure(ptx: str, arch: Arch) -> dict:
    """One compile + SASS pass, timed the way the evaluator's compile and sass stages run."""
    start = time.perf_counter()
    compiled = compile_ptx(ptx, arch)
    assembled = time.perf_counter()
    if not compiled.ok:
        raise RuntimeError(f"the benchmark kernel for {arch} did not compile:\n{compiled.message()}")
    opcodes = sass.full_opcodes(sass.disassemble(compiled.cubin))
    presence = sass.target_presence(TARGETS[arch], ptx, opcodes)
    done = time.perf_counter()
    return {
        "ptxas": assembled - start,
        "sass": done - assembled,
        "total": done - start,
        "registers": compiled.kernels[0].registers,
        "instructions": sum(k.instructions for k in sass.kernel_summaries(opcodes)),
        "targets": [g for g, p in presence.items() if p.ptx and p.sass],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.bench_compile", description=__doc__)
    parser.add_argument("--lines", type=int, default=3000, help="about how many PTX lines per kernel")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per arch (the median is shown)")
    parser.add_argument("--save", type=Path, help="also write the generated kernels into this folder")
    args = parser.parse_args(argv)
    header = (
        "arch",
        "PTX lines",
        "KB",
        "ptxas s",
        "SASS s",
        "total s",
        "min s",
        "max s",
        "regs",
        "SASS instr",
        "targets",
    )
    rows = [header]
    for arch in Arch:
        ptx = long_kernel(arch, args.lines)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"bench_{arch}.ptx").write_text(ptx)
        try:
            runs = [measure(ptx, arch) for _ in range(args.runs)]
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        totals = [r["total"] for r in runs]
        rows.append((
            str(arch), str(ptx.count("\n")), f"{len(ptx) / 1024:.0f}",
            f"{statistics.median(r['ptxas'] for r in runs):.2f}", f"{statistics.median(r['sass'] for r in runs):.2f}",
            f"{statistics.median(totals):.2f}", f"{min(totals):.2f}", f"{max(totals):.2f}",
            str(runs[0]["registers"]), str(runs[0]["instructions"]), ",".join(runs[0]["targets"]),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        cells = [
            c.ljust(w) if j in (0, len(row) - 1) else c.rjust(w)
            for j, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\nmedian of {args.runs} runs; ptxas -v to a cubin, then nvdisasm + opcode histogram + target search")
    return 0


if __name__ == "__main__":
    sys.exit(main())
