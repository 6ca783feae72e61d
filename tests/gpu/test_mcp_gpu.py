"""The MCP server on a real Hopper GPU through the local pool, called by the SDK's own client over stdio: the
reference GEMM evaluates as passed with its targets executed. Skipped without an sm_90 GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer

pytestmark = pytest.mark.hopper
mcp = pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]


def test_evaluate_over_stdio_passes_the_reference_gemm_with_its_targets_executed():
    from mcp import Client, StdioServerParameters

    answer = reference_answer(get_task("gemm").name, Arch.SM_90A)
    path = os.pathsep.join([str(REPO), *sys.path])  # the GPU image's --target site, as this process has it
    params = StdioServerParameters(command=sys.executable, args=["-m", "tools.mcp"], cwd=str(REPO),
                                   env={**os.environ, "PYTHONPATH": path})  # fmt: skip

    async def evaluate() -> str:
        async with Client(params, read_timeout_seconds=600) as client:
            result = await client.call_tool("evaluate", {"task": "gemm", "arch": "sm_90a", "answer": answer})
            return result.content[0].text

    text = anyio.run(evaluate)
    assert "PASSED" in text.splitlines()[0], text
    assert "targets met: True" in text and "speedup" in text
