"""Loading and storing one head's [BLOCK, D] tile of a [B, S, H, D] tensor through a TMA descriptor.

Two views of the same memory: the 2-D view [B·S, H·D], where the tile of batch b, rows s…, head h sits at
(b·S + s, h·D) and the box is [BLOCK, D]; and, for head dims that are not a power of two (Triton's tiles
must be), the 3-D view [B·S, H, D] with a box [BLOCK, 1, HEAD_DIM] where HEAD_DIM is D rounded up: TMA
zero-fills the columns past D on loads (so they add nothing to QKᵀ and give zero columns in PV) and
drops them on stores. `SPLIT_HEADS` picks the 3-D view; `col` is then the head index instead of h·D.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_tile(desc, row, col, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT_HEADS: tl.constexpr):
    if SPLIT_HEADS:
        return tl.reshape(desc.load([row, col, 0]), (BLOCK, HEAD_DIM))
    else:
        return desc.load([row, col])


@triton.jit
def store_tile(desc, row, col, value, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT_HEADS: tl.constexpr):
    if SPLIT_HEADS:
        desc.store([row, col, 0], tl.reshape(value, (BLOCK, 1, HEAD_DIM)))
    else:
        desc.store([row, col], value)


@triton.jit
def add_tile(desc, row, col, value, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT_HEADS: tl.constexpr):
    """TMA reduce-add (cp.reduce.async.bulk.tensor) of an fp32 tile."""
    if SPLIT_HEADS:
        desc.atomic_add([row, col, 0], tl.reshape(value, (BLOCK, 1, HEAD_DIM)))
    else:
        desc.atomic_add([row, col], value)


@triton.jit
def head_column(h, HEAD_DIM: tl.constexpr, SPLIT_HEADS: tl.constexpr):
    """The `col` coordinate of head h in the descriptor's view."""
    if SPLIT_HEADS:
        return h
    else:
        return h * HEAD_DIM


def padded_head_dim(d: int) -> int:
    """D rounded up to a power of two (Triton's block dims must be powers of two)."""
    return 1 << (d - 1).bit_length()


def head_view(d: int) -> tuple[tuple[str, ...], bool]:
    """The descriptor view for head dim d, and whether it is the split-heads (padded) one."""
    if padded_head_dim(d) == d:
        return ("B*S", "H*D"), False
    return ("B*S", "H", "D"), True


def head_block(rows: int, d: int) -> tuple[int, ...]:
    hd = padded_head_dim(d)
    return (rows, hd) if hd == d else (rows, 1, hd)
