"""The profile stage's verdict logic without a GPU: Nsight Compute's per-opcode cells parsed, launches summed
into per-group executed counts, `targets_met` and the paper's tag."""

from __future__ import annotations

from collections import Counter

from tasks.catalog import TARGETS
from tasks.schema import Arch
from tools.gpu.profile import MODIFIERS, THREAD, WARP, parse_counts, summarize

CELL = "766,464 (IMAD: 103,424; HGMMA: 32,768; UTMALDG: 2,048; EXIT: 1,056)"


def test_a_cell_reads_as_opcode_counts() -> None:
    assert parse_counts(CELL) == Counter({"IMAD": 103424, "HGMMA": 32768, "UTMALDG": 2048, "EXIT": 1056})
    assert parse_counts("0") == Counter()


def launch(warp: str, modifiers: str = "(HGMMA.64x128x16.F32.BF16: 32,768)") -> dict:
    return {"kernel": "k", WARP: parse_counts(warp), THREAD: parse_counts(warp), MODIFIERS: parse_counts(modifiers)}


def test_targets_met_needs_every_required_group_executed() -> None:
    both = summarize([launch(CELL)], TARGETS[Arch.SM_90A])
    assert both["target_counts"] == {"wgmma": 32768, "tma": 2048}
    assert both["targets_met"] is True and both["paper_tag"] is True
    assert both["target_variants"]["wgmma"] == {"HGMMA.64x128x16.F32.BF16": 32768}
    no_tma = summarize([launch("(IMAD: 10; HGMMA: 4)")], TARGETS[Arch.SM_90A])
    assert no_tma["targets_met"] is False and no_tma["paper_tag"] is True  # either group earns the paper's tag


def test_launches_of_several_kernels_add_up() -> None:
    summary = summarize([launch("(HGMMA: 4; UTMALDG: 1)"), launch("(UTMASTG: 2)")], TARGETS[Arch.SM_90A])
    assert summary["target_counts"] == {"wgmma": 4, "tma": 3}


def test_on_blackwell_tma_alone_does_not_earn_the_tag() -> None:
    summary = summarize([launch("(UTMALDG: 8; FFMA: 100)", "()")], TARGETS[Arch.SM_100A])
    assert summary["target_counts"]["tma"] == 8
    assert summary["targets_met"] is False and summary["paper_tag"] is False
