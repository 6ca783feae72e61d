"""Poisoning outputs and comparing them with what is expected, with statistics a model can act on: ours (relative L2
against the fp32 reference, `compare`) and the paper's (elementwise against the library's output, `compare_elements`:
tasks/paper_protocol.py)."""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel

from tasks.paper_protocol import ATOL, REL_EPS, RTOL

# NaN bit patterns with a payload no arithmetic produces, so "never written" is told apart from "NaN".
POISON_BITS = {
    torch.bfloat16: (torch.int16, 0x7FA5),
    torch.float16: (torch.int16, 0x7E5A),
    torch.float32: (torch.int32, 0x7FA5A5A5),
    # e4m3 has one NaN per sign and no payload: an fp8 NaN written by the kernel reads as unwritten (both fail).
    torch.float8_e4m3fn: (torch.uint8, 0x7F),
}


def poison(t: torch.Tensor) -> None:
    """Fill with the poison pattern (NaN with a payload for floats, 0xA5 bytes otherwise)."""
    if t.dtype in POISON_BITS:
        view, bits = POISON_BITS[t.dtype]
        t.view(view).fill_(bits)
    else:
        t.view(torch.uint8).fill_(0xA5)


def unwritten_mask(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in POISON_BITS:
        view, bits = POISON_BITS[t.dtype]
        return t.view(view) == bits
    return (t.view(torch.uint8) == 0xA5).view(*t.shape, -1).all(-1)


class OutputCheck(BaseModel):
    """How one output compares with the reference."""

    name: str
    passed: bool
    rel_l2: float  # ‖out − ref‖₂ / ‖ref‖₂ (NaN when any element is unwritten or non-finite)
    tolerance: float
    max_abs_err: float
    max_abs_at: list[int] | None
    max_rel_err: float  # |err| / max(|ref|, 1e-3·rms(ref))
    max_rel_at: list[int] | None
    out_of_tolerance: int  # elements with |err| > tol·(|ref| + rms(ref))
    nonfinite: int  # NaN/Inf the kernel wrote
    unwritten: int  # elements still holding the poison pattern
    elements: int
    bad_region: list[list[int]] | None  # per dim [first, last] index holding an unwritten or out-of-tolerance element

    def summary(self, dims: list[str]) -> str:
        if self.passed:
            return f"{self.name}: ok (rel L2 {self.rel_l2:.2e} ≤ {self.tolerance:g})"
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten:,} of {self.elements:,} elements never written")
        if self.nonfinite:
            parts.append(f"{self.nonfinite:,} NaN/Inf written")
        if math.isfinite(self.rel_l2):
            parts.append(f"rel L2 error {self.rel_l2:.3e} (tolerance {self.tolerance:g})")
        parts.append(f"{self.out_of_tolerance:,} elements out of tolerance")
        if self.max_abs_at is not None:
            parts.append(f"max abs error {self.max_abs_err:.3g} at {_index(self.name, dims, self.max_abs_at)}")
        if self.bad_region:
            span = ", ".join(f"{d}={a}..{b}" for d, (a, b) in zip(dims, self.bad_region, strict=False))
            parts.append(f"bad elements lie within {span}")
        return f"{self.name}: MISMATCH — " + "; ".join(parts)


def _index(name: str, dims: list[str], at: list[int]) -> str:
    return f"{name}[" + ", ".join(f"{d}={i}" for d, i in zip(dims, at, strict=False)) + "]"


def _unravel(flat: int, shape: torch.Size) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(flat % n)
        flat //= n
    return out[::-1]


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> OutputCheck:
    """Compare one output (any float dtype) with its fp32 reference."""
    unwritten = unwritten_mask(out)
    n_unwritten = int(unwritten.sum())
    got = out.float().masked_fill(unwritten, 0.0)
    finite = torch.isfinite(got)
    n_nonfinite = int((~finite).sum())
    err = (got - ref).masked_fill(~finite | unwritten, 0.0).abs_()
    ref_norm = float(torch.linalg.vector_norm(ref, dtype=torch.float64))
    rms = ref_norm / math.sqrt(max(ref.numel(), 1))
    if n_unwritten or n_nonfinite:
        rel_l2 = math.nan
    else:
        rel_l2 = float(torch.linalg.vector_norm(err, dtype=torch.float64)) / max(ref_norm, 1e-30)
    max_abs, at_abs = torch.max(err.view(-1), 0)
    rel = err / torch.clamp(ref.abs(), min=max(1e-3 * rms, 1e-30))
    max_rel, at_rel = torch.max(rel.view(-1), 0)
    bad = (err > tolerance * (ref.abs() + rms)) | unwritten | ~finite
    return OutputCheck(
        name=name,
        passed=n_unwritten == 0 and n_nonfinite == 0 and rel_l2 <= tolerance,
        rel_l2=rel_l2,
        tolerance=tolerance,
        max_abs_err=float(max_abs),
        max_abs_at=_unravel(int(at_abs), out.shape) if out.numel() else None,
        max_rel_err=float(max_rel),
        max_rel_at=_unravel(int(at_rel), out.shape) if out.numel() else None,
        out_of_tolerance=int(bad.sum()),
        nonfinite=n_nonfinite,
        unwritten=n_unwritten,
        elements=out.numel(),
        bad_region=_region(bad),
    )


def _region(mask: torch.Tensor) -> list[list[int]] | None:
    """[first, last] index per dim of the True elements, or None when there are none."""
    if not bool(mask.any()):
        return None
    region = []
    for d in range(mask.dim()):
        others = [i for i in range(mask.dim()) if i != d]
        along = mask.amax(dim=others) if others else mask
        idx = torch.nonzero(along).view(-1)
        region.append([int(idx[0]), int(idx[-1])])
    return region


WORST_SHOWN = 5  # the failing elements an ElementCheck keeps, largest absolute error first


class Element(BaseModel):
    """One element of an output: where, what the kernel wrote (None: never written), what was expected."""

    index: list[int]
    value: float | None
    expected: float


class ElementCheck(BaseModel):
    """How one output compares with the library's output by the paper's element rule (tasks/paper_protocol.py)."""

    name: str
    passed: bool
    elements: int
    failed: int  # elements out of both tolerances, never written, or non-finite
    unwritten: int  # elements still holding the poison pattern
    nonfinite: int  # NaN/Inf the kernel wrote
    matched: float  # the share of elements that pass
    required: float  # the share that must (1.0; 0.995 for fp8 attention)
    atol: float
    rtol: float
    max_abs_err: float  # over the written, finite elements
    max_rel_err: float  # |x − y| / (|y| + 1e-8), over the same
    worst: list[Element]  # the failing elements with the largest errors (unwritten and non-finite ones first)

    def summary(self, dims: list[str]) -> str:
        share = "every element" if self.required >= 1 else f"{self.required:.1%} of elements"
        if self.passed:
            within = self.elements - self.failed
            return f"{self.name}: ok ({within:,} of {self.elements:,} elements within; {share} must be)"
        parts = [f"{self.failed:,} of {self.elements:,} elements fail ({1 - self.matched:.3%}; {share} must pass)"]
        if self.unwritten:
            parts.append(f"{self.unwritten:,} never written")
        if self.nonfinite:
            parts.append(f"{self.nonfinite:,} NaN/Inf written")
        parts.append(f"max abs error {self.max_abs_err:.3g}, max rel error {self.max_rel_err:.3g}")
        shown = "; ".join(
            f"{_index(self.name, dims, e.index)} = {'unwritten' if e.value is None else f'{e.value:.6g}'} "
            f"(expected {e.expected:.6g})"
            for e in self.worst
        )
        return f"{self.name}: MISMATCH — " + "; ".join(parts) + (f"\n  worst: {shown}" if shown else "")


def compare_elements(
    name: str, out: torch.Tensor, expected: torch.Tensor, required: float = 1.0, atol: float = ATOL, rtol: float = RTOL
) -> ElementCheck:
    """The paper's rule on one output: an element fails when |x − y| > atol and |x − y| / (|y| + 1e-8) > rtol; an
    element never written or not finite fails too (the paper's comparison lets a NaN through: NaN > atol is false).
    The output passes when at least `required` of its elements pass and none is unwritten or non-finite."""
    unwritten = unwritten_mask(out)
    x = out.float().masked_fill(unwritten, 0.0)
    y = expected.float().reshape(out.shape).contiguous()  # a library may return a strided view (cuDNN's O)
    bad_value = unwritten | ~torch.isfinite(x)
    err = (x - y).abs_().masked_fill_(bad_value, 0.0)
    rel = err / (y.abs() + REL_EPS)
    failing = ((err > atol) & (rel > rtol)) | bad_value
    n_failed, n_unwritten = int(failing.sum()), int(unwritten.sum())
    n_nonfinite = int((bad_value & ~unwritten).sum())
    elements = out.numel()
    matched = 1.0 - n_failed / elements if elements else 1.0
    # The worst: bad values first (an infinite score), then the largest absolute errors.
    score = err.masked_fill(bad_value, math.inf).masked_fill_(~failing, -1.0).view(-1)
    top = torch.topk(score, min(WORST_SHOWN, n_failed)).indices.tolist() if n_failed else []
    flat_x, flat_y, flat_unwritten = out.float().view(-1), y.view(-1), unwritten.view(-1)
    worst = [Element(index=_unravel(i, out.shape), expected=float(flat_y[i]),
                     value=None if bool(flat_unwritten[i]) else float(flat_x[i])) for i in top]  # fmt: skip
    return ElementCheck(
        name=name,
        passed=n_unwritten == 0 and n_nonfinite == 0 and matched >= required,
        elements=elements,
        failed=n_failed,
        unwritten=n_unwritten,
        nonfinite=n_nonfinite,
        matched=matched,
        required=required,
        atol=atol,
        rtol=rtol,
        max_abs_err=float(err.max()) if elements else 0.0,
        max_rel_err=float(rel.max()) if elements else 0.0,
        worst=worst,
    )


class RerunDifference(BaseModel):
    """How one output of a second run on the very same inputs differs from the first run's."""

    name: str
    elements: int
    changed: int  # elements whose bits differ between the runs
    written_once: int  # elements written (or finite) in one run but not in the other
    rel_l2: float  # ‖second − first‖₂ / ‖first‖₂ over the elements finite and written in both
    tolerance: float

    @property
    def beyond_tolerance(self) -> bool:
        """Differences a legitimate change of summation order (fp32 atomics, reduce-adds) cannot explain."""
        return self.written_once > 0 or self.rel_l2 > self.tolerance

    def summary(self) -> str:
        if not self.changed:
            return f"{self.name}: identical"
        once = f", {self.written_once:,} written or finite in one run only" if self.written_once else ""
        return f"{self.name}: {self.changed:,} of {self.elements:,} elements changed, rel L2 {self.rel_l2:.2e}{once}"


def rerun_difference(name: str, first: torch.Tensor, second: torch.Tensor, tolerance: float) -> RerunDifference:
    """Compare two runs' values of one output, bit for bit and by relative L2 distance."""
    view = POISON_BITS.get(first.dtype, (torch.uint8, None))[0]
    changed = first.view(view) != second.view(view)
    if view is torch.uint8:  # not a float: one element spans several bytes
        changed = changed.view(*first.shape, -1).any(-1)
    valid_a = ~unwritten_mask(first) & torch.isfinite(first.float())
    valid_b = ~unwritten_mask(second) & torch.isfinite(second.float())
    both = valid_a & valid_b
    a = first.float().masked_fill(~both, 0.0)
    b = second.float().masked_fill(~both, 0.0)
    norm = float(torch.linalg.vector_norm(a, dtype=torch.float64))
    diff = float(torch.linalg.vector_norm(b - a, dtype=torch.float64))
    return RerunDifference(name=name, elements=first.numel(), changed=int(changed.sum()),
                           written_once=int((valid_a ^ valid_b).sum()), rel_l2=diff / max(norm, 1e-30),
                           tolerance=tolerance)  # fmt: skip
