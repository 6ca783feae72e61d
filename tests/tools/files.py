"""The fixture files the tools tests read (tests/fixtures/ptx and tests/fixtures/answers)."""

from __future__ import annotations

from pathlib import Path

from tasks.schema import Arch

FIXTURES = Path(__file__).parents[1] / "fixtures"
PTX = FIXTURES / "ptx"
ANSWERS = FIXTURES / "answers"

# name → (file under fixtures/ptx, the arch it is written for). Not 'hopper' or 'gpu': tests/conftest.py
# skips every test with such a keyword, and parametrize ids are keywords.
KERNELS = {
    "wgmma": ("hopper_wgmma_tma.ptx", Arch.SM_90A),
    "tcgen05": ("blackwell_tcgen05.ptx", Arch.SM_100A),
    "triton_sm_90a": ("triton_gemm_sm_90a.ptx", Arch.SM_90A),
    "triton_sm_100a": ("triton_gemm_sm_100a.ptx", Arch.SM_100A),
    "local_array": ("local_array.ptx", Arch.SM_90A),
}


def read_ptx(name: str) -> str:
    return (PTX / KERNELS[name][0]).read_text()


def read_answer(name: str) -> str:
    return (ANSWERS / name).read_text()
