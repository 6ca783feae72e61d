"""Where a correct attempt's time goes: each profiled launch as Nsight Compute measured it (KernelPerf), beside the
baseline library's, and the likely limiter (PerfReport). tools/gpu/perf.py measures them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class KernelPerf(BaseModel):
    """One profiled launch: where its time goes, as Nsight Compute measured it (tools/gpu/perf.py reads them).
    A figure ncu did not report is None, never a guess."""

    kernel: str
    duration_ms: float | None = None
    sm_throughput_pct: float | None = Field(None, description="SM throughput, % of peak sustained.")
    tensor_pipe_pct: float | None = Field(None, description="Tensor pipe active, % of peak sustained active cycles.")
    l2_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    l2_hit_pct: float | None = None
    smem_bank_conflicts: float | None = Field(None, description="Shared-memory data bank conflicts, in all.")
    warps_per_scheduler: float | None = Field(None, description="Achieved occupancy: active warps per scheduler.")
    registers: int | None = None
    shared_bytes: int | None = Field(None, description="Static plus dynamic shared memory per block.")
    grid: list[int] = Field(default_factory=list)
    block: list[int] = Field(default_factory=list)
    cluster: list[int] | None = Field(None, description="None: launched without a cluster.")
    waves_per_sm: float | None = None
    stalls: dict[str, float] = Field(
        default_factory=dict, description="Warps stalled per issued instruction, by reason."
    )

    def top_stalls(self, n: int = 3) -> list[tuple[str, float]]:
        """The largest stall reasons ('selected', a warp that did issue, is not a stall)."""
        ranked = sorted(((k, v) for k, v in self.stalls.items() if k != "selected"), key=lambda kv: -kv[1])
        return ranked[:n]


def longest(launches: list[KernelPerf]) -> KernelPerf:
    """The launch that takes the most time: the one a table and the limiter rules look at."""
    return max(launches, key=lambda k: k.duration_ms or 0.0)


class HotLine(BaseModel):
    """One line of the answer with Nsight Compute's per-instruction counters summed over the SASS it compiled to
    (tools/gpu/hot_lines.py), for the launches the perf pass profiled."""

    kernel: str
    file: str = Field(description="kernel.ptx (a PTX answer) or answer.cu (a CUDA answer).")
    line: int
    quoted: str | None = Field(None, description="The line as the answer wrote it.")
    bank_conflicts: float = Field(
        0.0, description="Excess shared-memory wavefronts (ncu's L1 Wavefronts Shared Excessive): bank conflicts."
    )
    stall_samples: float = Field(0.0, description="Warp stall samples (ncu's Warp Stall Sampling, all samples).")
    executed: float = Field(0.0, description="Warp-level instructions executed.")


class RegisterSetting(BaseModel):
    """A `setmaxnreg` in the answer: from there on, the warpgroup that runs it holds `registers` per thread."""

    kernel: str
    action: Literal["inc", "dec"]
    registers: int
    file: str
    line: int


class PerfReport(BaseModel):
    """The perf pass: the candidate's launches beside the baseline library's (profiled once per task and GPU
    worker), and the likely limiter named by the first of tools/gpu/limiters.py's rules that holds."""

    launches: list[KernelPerf] = Field(min_length=1)
    library: str = Field(description="The baseline library (cuBLAS, cuDNN).")
    baseline: list[KernelPerf] | None = Field(None, description="The library's launches; None: not profiled.")
    baseline_note: str | None = Field(None, description="Why the library's launches are missing.")
    limiter: str | None = Field(None, description="The rule that holds (tools/gpu/limiters.py), or None.")
    limiter_says: str | None = Field(None, description="That rule's line for the model.")
    seconds: float = Field(0.0, description="The pass's wall time, the library's profile included when it ran.")
    hot_lines: list[HotLine] = Field(
        default_factory=list, description="The lines with the most bank conflicts, stall samples, executions."
    )
    hot_lines_note: str | None = Field(None, description="Why there are no per-line counters.")
    register_settings: list[RegisterSetting] = Field(default_factory=list, description="The answer's setmaxnreg.")
    scratch_init_ms: float | None = Field(
        None, description="Resetting the scratch buffers before each run (the time stage's measure); None: none."
    )
