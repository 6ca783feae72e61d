"""The PTXBench paper's published best results on the core five, as data: the one place agent.report's table beside
the paper's reads them from.

Source: the paper's public repository (zhang677/PTXBench), benchmark/plot_viewer_v1/data/
correctness_rate_by_release_date.csv, arch_instruction_correctness_by_release_date.csv and
best_speedup_by_release_date.csv, rows of arch `hopper` at turn_limit 8, as ../shared/CATALOG.md ("Its published best
results") records them, read 2026-12-02. Measured on H100s by the paper's harness (its correctness rule and timing:
eval.criterion=paper, eval.speedup=paper here). Each rate is a fraction of trajectories, pooled over the prompt
variants: the frontier rows are 12 trajectories (3 variants × 4), the Qwen rows 20. "Best frontier model" is the
frontier model with the best speedup on that problem, so it is not one model down the column.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GPU = "H100"
ARCH = "sm_90a"  # the arch those H100s are: runs on another are not compared with these numbers
TURN_LIMIT = 8
SOURCE = (
    "zhang677/PTXBench, benchmark/plot_viewer_v1/data/*_by_release_date.csv (arch hopper, turn_limit 8), as "
    "../shared/CATALOG.md records them"
)


class PaperResult(BaseModel):
    """One published cell: a model's (or checkpoint's) trajectories on one problem, at turn ≤ 8."""

    model_config = ConfigDict(frozen=True)
    problem: str = Field(description="Our task name, which is the paper's definition at its core workload.")
    column: str = Field(description="Which published column (a key of COLUMNS): frontier, base or sft.")
    model: str = Field(description="The model or checkpoint behind the cell, as the CSVs name it.")
    trajectories: int = Field(ge=1)
    correct: float = Field(ge=0, le=1, description="Share of trajectories with a correct turn.")
    correct_targets: float = Field(ge=0, le=1, description="Share correct with the arch's instructions executed.")
    best_speedup: float | None = Field(description="Best speedup of a correct turn; None: none was correct.")


FRONTIER, BASE, SFT = "frontier", "base", "sft"
COLUMNS = {FRONTIER: "best frontier model", BASE: "Qwen3.6-27B base", SFT: "its best SFT checkpoint"}


def _row(problem: str, column: str, model: str, n: int, c: float, t: float, s: float | None) -> PaperResult:
    return PaperResult(problem=problem, column=column, model=model, trajectories=n, correct=c, correct_targets=t,
                       best_speedup=s)  # fmt: skip


RESULTS: tuple[PaperResult, ...] = (
    _row("gemm_n7168_k5120", FRONTIER, "Claude Opus 4.8", 12, 1.0, 1.0, 0.976),
    _row("gemm_n7168_k5120", BASE, "Qwen3.6-27B", 20, 0.0, 0.0, None),
    _row("gemm_n7168_k5120", SFT, "Qwen3.6-27B-s5", 20, 0.70, 0.70, 0.602),
    _row("mha_with_lse_d128", FRONTIER, "Claude Opus 4.8", 12, 1.0, 1.0, 0.839),
    _row("mha_with_lse_d128", BASE, "Qwen3.6-27B", 20, 0.0, 0.0, None),
    _row("mha_with_lse_d128", SFT, "Qwen3.6-27B-s1", 20, 0.65, 0.65, 0.565),
    _row("mha_with_lse_d128_causal", FRONTIER, "Claude Opus 4.8", 12, 1.0, 1.0, 0.806),
    _row("mha_with_lse_d128_causal", BASE, "Qwen3.6-27B", 20, 0.0, 0.0, None),
    _row("mha_with_lse_d128_causal", SFT, "Qwen3.6-27B-s3", 20, 0.35, 0.35, 0.388),
    _row("mha_bwd_d128", FRONTIER, "Gemini 3.1 Pro", 12, 0.92, 0.92, 0.515),
    _row("mha_bwd_d128", BASE, "Qwen3.6-27B", 20, 0.0, 0.0, None),
    _row("mha_bwd_d128", SFT, "Qwen3.6-27B-s5", 20, 0.20, 0.20, 0.295),
    _row("mha_bwd_d128_causal", FRONTIER, "Gemini 3.1 Pro", 12, 0.83, 0.83, 0.639),
    _row("mha_bwd_d128_causal", BASE, "Qwen3.6-27B", 20, 0.0, 0.0, None),
    _row("mha_bwd_d128_causal", SFT, "Qwen3.6-27B-s5", 20, 0.30, 0.30, 0.246),
)


def published(problem: str) -> dict[str, PaperResult]:
    """The paper's cells for a problem by column; empty where it published none."""
    return {r.column: r for r in RESULTS if r.problem == problem}
