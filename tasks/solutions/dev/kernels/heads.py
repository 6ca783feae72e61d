"""How the attention kernels see a [B, heads, S, D] tensor: as the contiguous 2-D view [B·heads·S, D], one
row per (batch, head, position), so the tile of (batch b, head h, rows s…) is one TMA box [BLOCK, HEAD_DIM]
at row (b·heads + h)·S + s, column 0.

HEAD_DIM is D rounded up to a power of two (Triton's block dims must be): for D=96 the box is 128 wide and
TMA zero-fills the columns past D on loads (they add nothing to QKᵀ and give zero columns in PV) and drops
them on stores, so no padding is ever written to memory.
"""

from __future__ import annotations

from tasks.schema import Task


def padded_head_dim(d: int) -> int:
    """D rounded up to a power of two."""
    return 1 << (d - 1).bit_length()


def row_view(task: Task, tensor: str) -> tuple[str, str]:
    """The 2-D view of one of the task's [B, heads, S, D] tensors, as dim expressions."""
    _, heads, _, _ = task.tensor(tensor).shape
    return (f"B*{heads}*S", "D")


def kv_group(task: Task) -> int:
    """Query heads per K/V head (1 without grouped-query attention): query head bh reads K/V head bh // group."""
    return task.dims["H"] // task.dims["HKV"]
