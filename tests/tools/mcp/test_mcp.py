"""The MCP server through the official SDK's own client: in-process, as a subprocess over stdio (the way a coding
agent registers it), and over streamable HTTP with the service's token rule. No GPU here: compile is the
real static stages; evaluate reports the GPU stages as not run, saying why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

from tasks.catalog import TASKS, get_task  # noqa: E402
from tasks.schema import Arch  # noqa: E402
from tasks.solutions import reference_answer  # noqa: E402
from tests.tools.serve.process import free_port  # noqa: E402
from tools.mcp.server import MAX_REPLY_CHARS, build_server, cut  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
REFERENCE = reference_answer(get_task("gemm").name, Arch.SM_90A)
TOOLS = {"list_tasks", "task_prompt", "compile", "evaluate", "profile", "sanitize"}


def text(result) -> str:
    assert not result.is_error, result
    (content,) = result.content
    return content.text


async def _session(server) -> dict[str, str]:
    async with Client(server) as client:
        tools = await client.list_tools()
        schema = {t.name: t.input_schema for t in tools.tools}
        compiled = text(await client.call_tool("compile", {"task": "gemm", "arch": "sm_90a", "answer": REFERENCE}))
        broken = REFERENCE.replace(".entry", ".entyr", 1)
        failed = text(await client.call_tool("compile", {"task": "gemm", "arch": "sm_90a", "answer": broken}))
        unknown = text(await client.call_tool("evaluate", {"task": "gemm_n7168_k512", "arch": "sm_90a",
                                                            "answer": REFERENCE}))  # fmt: skip
        listed = text(await client.call_tool("list_tasks", {}))
        prompt = text(await client.call_tool("task_prompt", {"task": "attn_bwd"}))
        evaluated = text(await client.call_tool("evaluate", {"task": "gemm", "arch": "sm_90a", "answer": REFERENCE}))
        missing = await client.call_tool("compile", {"task": "gemm"})
    return {"tools": schema, "compiled": compiled, "failed": failed, "unknown": unknown, "listed": listed,
            "prompt": prompt, "evaluated": evaluated, "missing": missing}  # fmt: skip


def check(seen: dict) -> None:
    assert set(seen["tools"]) == TOOLS
    assert seen["tools"]["sanitize"]["properties"]["tool"]["enum"] == ["memcheck", "racecheck"]  # typed inputs
    assert set(seen["tools"]["compile"]["required"]) == {"task", "arch", "answer"}
    assert "UNVERIFIED" in seen["compiled"] and re.search(r"\[ok\s*\] sass", seen["compiled"])
    assert "compile runs the static stages only" in seen["compiled"]
    assert "COMPILE_ERROR" in seen["failed"] and "entyr" in seen["failed"]
    assert seen["unknown"].startswith("error: unknown task 'gemm_n7168_k512'")
    assert all(name in seen["listed"] for name in TASKS)
    assert "dQ: bfloat16 [B=4 × H=48 × S=4096 × D=128]" in seen["prompt"] and "cuDNN" in seen["prompt"]
    assert "UNVERIFIED" in seen["evaluated"] and re.search(r"\[skip\] run", seen["evaluated"])
    assert seen["missing"].is_error  # the SDK's own argument check: the client is told, the server lives on


def test_in_process_the_sdk_client_lists_the_tools_and_compiles() -> None:
    check(anyio.run(_session, build_server()))


def test_over_stdio_as_a_client_starts_it() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "tools.mcp", "--no-gpu"], cwd=str(REPO),
                                   env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    check(anyio.run(_session, params))


def test_over_http_with_a_token_a_request_without_it_is_refused(tmp_path: Path) -> None:
    token = "mcp-7f3a9c2e51b84d06a1e9"  # long, printable, many different characters: the token rule
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PTXBENCH_SERVE_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-m", "tools.mcp", "--transport", "http", "--port", str(port),
                             "--no-gpu"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.2)
        assert refused.status_code == 401

        async def listed() -> set[str]:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                from mcp.client.streamable_http import streamable_http_client

                async with Client(streamable_http_client(url, http_client=http)) as client:
                    return {t.name for t in (await client.list_tools()).tools}

        assert anyio.run(listed) == TOOLS
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert token not in err


def test_off_loopback_without_a_token_it_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PTXBENCH_SERVE_TOKEN"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tools.mcp", "--transport", "http", "--host", "0.0.0.0",
                           "--no-gpu"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "set PTXBENCH_SERVE_TOKEN" in done.stderr and "Traceback" not in done.stderr


def test_long_replies_are_cut_with_a_marker() -> None:
    long = "x" * (MAX_REPLY_CHARS + 5)
    assert cut(long).endswith("[cut: 5 more characters not shown]") and cut("short") == "short"
