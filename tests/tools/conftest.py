"""Compiled results shared by the tools tests: each fixture kernel is assembled once per session with the
real ptxas and disassembled once with the real nvdisasm, side by side (nvdisasm takes about half a second
to start, whatever the cubin)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.tools.files import KERNELS, read_ptx
from tools import sass
from tools.assemble import CompileResult, compile_ptx


@pytest.fixture(scope="session")
def compiled() -> dict[str, CompileResult]:
    """Every fixture kernel assembled for its own arch."""
    with ThreadPoolExecutor(len(KERNELS)) as pool:
        results = {name: pool.submit(compile_ptx, read_ptx(name), arch) for name, (_, arch) in KERNELS.items()}
    return {name: future.result() for name, future in results.items()}


@pytest.fixture(scope="session")
def opcodes(compiled) -> dict[str, dict[str, Counter[str]]]:
    """Every fixture kernel's SASS: kernel name → opcode (with modifiers) → static count."""
    with ThreadPoolExecutor(len(compiled)) as pool:
        listings = {name: pool.submit(sass.disassemble, result.cubin) for name, result in compiled.items()}
    return {name: sass.full_opcodes(future.result()) for name, future in listings.items()}
