"""The likely limiter of a slow but correct kernel, from simple documented rules over its profile and the
baseline library's: data, in one place, tried in order; the first that holds is named in the feedback.

Each rule reads both sides' launches (`Sides`): mostly the candidate's longest launch (`k`) and, where it
compares, the library's longest (`lib`, absent when the library was not profiled). The thresholds are
deliberately coarse, set from what the H200 showed (tests/tools/gpu/test_perf.py): a rule names where to look,
the table beside it shows the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.perf_report import KernelPerf, longest


@dataclass(frozen=True)
class Sides:
    ours: list[KernelPerf]
    theirs: list[KernelPerf] | None

    @property
    def k(self) -> KernelPerf:
        return longest(self.ours)

    @property
    def lib(self) -> KernelPerf | None:
        return longest(self.theirs) if self.theirs else None


@dataclass(frozen=True)
class Rule:
    name: str
    when: str  # the condition, in words (for the rules' documentation and tests)
    holds: Callable[[Sides], bool]
    says: str  # the line the model reads


def _top_stall(k: KernelPerf) -> str | None:
    top = k.top_stalls(1)
    return top[0][0] if top else None


def _lt(value: float | None, bound: float) -> bool:
    return value is not None and value < bound


def _gt(value: float | None, bound: float) -> bool:
    return value is not None and value > bound


def _below(s: Sides, share: float) -> bool:
    """The candidate's tensor pipe is below `share` of the library's."""
    lib = s.lib
    return lib is not None and lib.tensor_pipe_pct is not None and _lt(s.k.tensor_pipe_pct, share * lib.tensor_pipe_pct)


def _ms(launches: list[KernelPerf]) -> float:
    return sum(k.duration_ms or 0.0 for k in launches)


def _split(s: Sides) -> bool:
    """The main launch keeps pace with the library's (within 5%), but the rest of the sequence takes over a fifth
    of its time and makes the whole slower than the library's."""
    lib, total = s.lib, _ms(s.ours)
    if lib is None or not s.k.duration_ms or not lib.duration_ms or not total:
        return False
    rest = total - s.k.duration_ms
    return s.k.duration_ms <= 1.05 * lib.duration_ms and rest > 0.2 * total and total > _ms(s.theirs)


def _conflict_rate(k: KernelPerf | None) -> float | None:
    """Shared-memory bank conflicts per millisecond."""
    if k is None or k.smem_bank_conflicts is None or not k.duration_ms:
        return None
    return k.smem_bank_conflicts / k.duration_ms


def _conflicted(s: Sides) -> bool:
    ours, theirs = _conflict_rate(s.k), _conflict_rate(s.lib)
    return ours is not None and theirs is not None and ours > 1e6 and ours > 2 * theirs


RULES: list[Rule] = [
    Rule(
        "launch_split",
        "the longest launch within 5% of the library's, but the other launches over a fifth of the time",
        _split,
        "your main kernel keeps pace with the library's, but the other launches of the sequence cost more than the "
        "library spends on them: fold their work into the main kernel (a backward can accumulate dQ there, in fp32 "
        "scratch with TMA reduce-add or atomics, as the library's does) or shorten them",
    ),
    Rule(
        "memory_stalled",
        "tensor pipe under 30% of cycles and long-scoreboard (global memory) the top stall",
        lambda s: _lt(s.k.tensor_pipe_pct, 30) and _top_stall(s.k) == "long_scoreboard",
        "memory-stalled: warps mostly wait on global-memory loads and the tensor pipe is nearly idle; stage the "
        "operands in shared memory with TMA, several stages ahead, so that each wgmma finds its tiles ready",
    ),
    Rule(
        "dram_bound",
        "DRAM throughput above 80% of peak",
        lambda s: _gt(s.k.dram_throughput_pct, 80),
        "DRAM bandwidth is the limit: every byte fetched again costs; reuse tiles through L2 (a grouped tile order) "
        "or shared memory, or fetch each operand once per cluster with TMA multicast",
    ),
    Rule(
        "l2_feed",
        "tensor pipe below 85% of the library's while L2 throughput is above 70% of peak",
        lambda s: _below(s, 0.85) and _gt(s.k.l2_throughput_pct, 70),
        "feeding the tensor cores from L2 is the limit: larger tiles, or 2-CTA clusters sharing operands by TMA "
        "multicast, cut the L2 traffic per MMA",
    ),
    Rule(
        "barrier_wait",
        "barrier the top stall",
        lambda s: _top_stall(s.k) == "barrier",
        "warps wait at barriers: the pipeline is too shallow or the producer starves the consumers; add stages, "
        "let a producer warpgroup run ahead on mbarriers instead of block-wide barriers",
    ),
    Rule(
        "mma_wait",
        "gmma (waiting on wgmma results) the top stall",
        lambda s: _top_stall(s.k) == "gmma",
        "warps wait on wgmma results: keep one wgmma group in flight (wgmma.wait_group 1) and overlap the softmax "
        "or epilogue of one tile with the MMAs of the next",
    ),
    Rule(
        "bank_conflicts",
        "more than one shared-memory bank conflict per ns of kernel time, and over twice the library's rate",
        _conflicted,
        "shared-memory bank conflicts: swizzle the tiles (TMA's 128B swizzle, with the matching descriptor "
        "mode) or pad rows so that a warp's accesses fall in distinct banks",
    ),
    Rule(
        "not_persistent",
        "more than 4 waves per SM while the library runs one persistent wave",
        lambda s: _gt(s.k.waves_per_sm, 4) and s.lib is not None and _lt(s.lib.waves_per_sm, 1.5),
        "many short waves where the library runs one persistent CTA per SM: a persistent grid walking tiles in "
        "an L2-friendly order overlaps one tile's epilogue with the next tile's loads",
    ),
    Rule(
        "tail",
        "between 1 and 4 waves per SM with a last wave under half full",
        lambda s: s.k.waves_per_sm is not None and 1 < s.k.waves_per_sm < 4 and 0 < s.k.waves_per_sm % 1 < 0.5,
        "the last wave leaves most SMs idle: size the grid to the SM count (a persistent grid) or change the tile",
    ),
    Rule(
        "tensor_busy",
        "tensor pipe above 85% of cycles",
        lambda s: _gt(s.k.tensor_pipe_pct, 85),
        "the tensor pipe is busy most cycles: what remains is overlap (the epilogue, softmax, the last wave) and "
        "fewer instructions around the MMAs",
    ),
]


def limiter(ours: list[KernelPerf], theirs: list[KernelPerf] | None) -> Rule | None:
    """The first rule that holds for the candidate's launches beside the library's, or None."""
    if not ours:
        return None
    sides = Sides(ours, theirs or None)
    return next((rule for rule in RULES if rule.holds(sides)), None)
