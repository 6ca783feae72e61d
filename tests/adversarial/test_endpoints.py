"""An endpoint that misbehaves: it echoes the API key in its errors, it is dead, its address is not a URL,
its Retry-After is nan, negative or huge. The key reaches no file and no terminal; a dead endpoint says
what it is doing; a bad address is a configuration error."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.loop.config import OpenAIConfig
from agent.loop.policies import openai_policy
from agent.loop.policies.openai_policy import OpenAIPolicy
from agent.loop.records import Message
from agent.solve import main as solve
from tests.agent.openai_server import Behaviour, OpenAIServer, Recorder

KEY_ENV = "PTXBENCH_ADVERSARIAL_KEY"
KEY = "sk-adversarial-0123456789abcdef0123456789abcdef"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with OpenAIServer() as s:
        yield s


def endpoint_args(base_url: str, runs_dir: Path, run_id: str, *extra: str) -> list[str]:
    return ["task=gemm", "arch=sm_90a", "llm.model=m", f"llm.base_url={base_url}", f"llm.api_key_env={KEY_ENV}",
            "llm.backoff_s=0.01", "eval.gpu=false", f"runs_dir={runs_dir}", f"run_id={run_id}", *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "code", "key"),
    [(401, 2, KEY), (500, 1, KEY), (500, 1, "plain-secret-value-0123456789")],  # the last looks like nothing
)
def test_an_echoed_key_reaches_no_file_and_no_terminal(
    status: int, code: int, key: str, server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, key)
    server.default = Behaviour(status=status, echo_authorization=True)
    assert solve(endpoint_args(server.base_url, runs_dir, "echo", "llm.retries=1")) == code
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {key}"  # the server did see it
    out, err = capsys.readouterr()
    assert f"HTTP {status}" in err and "[redacted]" in err
    leaks = [p for p in runs_dir.rglob("*") if p.is_file() and key[:12].encode() in p.read_bytes()]
    assert leaks == [] and key[:12] not in out + err  # not the key, nor a piece of it


def test_a_dead_endpoint_says_each_retry_and_its_wait(runs_dir: Path, capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv(KEY_ENV, KEY)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert solve(endpoint_args(f"http://127.0.0.1:{port}/v1", runs_dir, "dead", "llm.retries=2")) == 1
    err = capsys.readouterr().err
    assert "turn 1: connection failed" in err
    assert "retry 1 of 2 in 0.0 s" in err and "retry 2 of 2 in 0.0 s" in err
    assert "gave up after 3 tries" in err


@pytest.mark.parametrize("url", ["notaurl", "file:///etc/passwd", "http://", "http://host:99999/v1"])
def test_a_malformed_base_url_is_a_configuration_error(
    url: str, runs_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    assert solve(endpoint_args(url, runs_dir, "badurl")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid settings:") and "llm.base_url" in err
    assert not runs_dir.exists()


@pytest.mark.parametrize(
    ("header", "waited"),
    [("nan", 0.01), ("-5", 0.01), ("inf", 0.01), ("soon", 0.01), ("1e12", openai_policy.MAX_WAIT_S), ("0.5", 0.5)],
)
def test_retry_after_is_used_only_when_usable(
    header: str, waited: float, server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(openai_policy.time, "sleep", waits.append)
    server.script.extend([Behaviour(status=429, headers={"retry-after": header}), Behaviour(content="done")])
    config = OpenAIConfig(base_url=server.base_url, model="m", api_key_env=KEY_ENV, backoff_s=0.01, retries=2)
    reply = OpenAIPolicy(config, Recorder()).respond([Message(role="user", content="hi")], turn=1)
    assert reply.text == "done" and waits == [waited]
