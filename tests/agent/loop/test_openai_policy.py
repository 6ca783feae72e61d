"""The openai policy against a local OpenAI-compatible server: the real openai client over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli import ConfigError
from agent.loop.config import OpenAIConfig
from agent.loop.policies import ModelError
from agent.loop.policies.openai_policy import OpenAIPolicy
from agent.loop.records import Message
from agent.solve import main
from tests.agent.helpers import fixture_text, solve
from tests.agent.openai_server import Behaviour, OpenAIServer, Recorder

KEY_ENV = "PTXBENCH_TEST_KEY"
SECRET = "sk-test-secret-4f9a"
MESSAGES = [Message(role="system", content="be brief"), Message(role="user", content="write a kernel")]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with OpenAIServer() as s:
        yield s


def make_policy(server: OpenAIServer, **settings) -> tuple[OpenAIPolicy, list[tuple[str, dict]]]:
    recorder = Recorder()
    defaults = {"backoff_s": 0.01, "timeout_s": 5, "retries": 3}
    config = OpenAIConfig(base_url=server.base_url, model="test-model", api_key_env=KEY_ENV, **{**defaults, **settings})
    return OpenAIPolicy(config, recorder), recorder.events


def test_normal_answer_and_request(server: OpenAIServer) -> None:
    server.script.append(Behaviour(content="```ptx\n```", reasoning={"reasoning_content": "thinking hard"}))
    policy, events = make_policy(server, temperature=0.2, max_tokens=1000, extra={"top_p": "0.95"})
    reply = policy.respond(MESSAGES, turn=1)
    assert reply.text == "```ptx\n```"
    assert reply.reasoning == "thinking hard"
    assert reply.finish_reason == "stop"
    assert (reply.prompt_tokens, reply.completion_tokens) == (1234, 56)
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {SECRET}"
    assert request["body"]["model"] == "test-model"
    assert request["body"]["messages"] == [m.model_dump() for m in MESSAGES]
    assert request["body"]["temperature"] == 0.2
    assert request["body"]["max_completion_tokens"] == 1000
    assert request["body"]["top_p"] == 0.95  # an extra field, its value read as JSON
    assert events == []


def test_reasoning_field_and_missing_usage(server: OpenAIServer) -> None:
    server.script.append(Behaviour(content="hi", reasoning={"reasoning": "short thought"}, usage=False))
    reply = make_policy(server)[0].respond(MESSAGES, turn=1)
    assert reply.reasoning == "short thought"
    assert reply.prompt_tokens is None and reply.completion_tokens is None  # the loop counts them instead
    assert "temperature" not in server.requests[0]["body"]


def test_rate_limited_then_answers(server: OpenAIServer) -> None:
    server.script.extend([Behaviour(status=429, headers={"retry-after-ms": "20"}), Behaviour(content="done")])
    policy, events = make_policy(server)
    assert policy.respond(MESSAGES, turn=3).text == "done"
    assert len(server.requests) == 2
    assert [(name, fields["turn"], fields["wait_s"]) for name, fields in events] == [("llm.retry", 3, 0.02)]
    assert "HTTP 429" in events[0][1]["reason"]


def test_server_error_then_answers(server: OpenAIServer) -> None:
    server.script.extend([Behaviour(status=503), Behaviour(status=500), Behaviour(content="finally")])
    policy, events = make_policy(server)
    assert policy.respond(MESSAGES, turn=1).text == "finally"
    assert [e[1]["reason"].split(":")[0] for e in events] == ["HTTP 503", "HTTP 500"]


def test_server_error_until_the_retries_are_spent(server: OpenAIServer) -> None:
    server.default = Behaviour(status=500)
    policy, events = make_policy(server, retries=2)
    with pytest.raises(ModelError, match=r"HTTP 500.*gave up after 3 tries"):
        policy.respond(MESSAGES, turn=1)
    assert len(server.requests) == 3 and len(events) == 2


def test_time_out_then_answers(server: OpenAIServer) -> None:
    server.script.extend([Behaviour(content="too late", delay_s=1.5), Behaviour(content="in time")])
    policy, events = make_policy(server, timeout_s=0.3)
    assert policy.respond(MESSAGES, turn=1).text == "in time"
    assert events[0][1]["reason"] == "no answer within 0.3 s"


def test_truncated_answer_is_reported(server: OpenAIServer) -> None:
    server.script.append(Behaviour(content="```ptx\n.version 8.0\n", finish_reason="length"))
    reply = make_policy(server)[0].respond(MESSAGES, turn=1)
    assert reply.finish_reason == "length"
    assert reply.text.startswith("```ptx")


@pytest.mark.parametrize(
    "garbage",
    [b"<html>502 Bad Gateway</html>", b'{"object": "chat.completion"}', b'{"choices": []}'],
    ids=["not-json", "no-choices", "empty-choices"],
)
def test_garbage_is_retried(server: OpenAIServer, garbage: bytes) -> None:
    server.script.extend([Behaviour(body=garbage), Behaviour(content="sane")])
    policy, events = make_policy(server)
    assert policy.respond(MESSAGES, turn=1).text == "sane"
    assert events[0][1]["reason"].startswith("unusable reply")


def test_garbage_until_the_retries_are_spent(server: OpenAIServer) -> None:
    server.default = Behaviour(body=b"\x00\x01 not a completion")
    with pytest.raises(ModelError, match="unusable reply"):
        make_policy(server, retries=1)[0].respond(MESSAGES, turn=1)


def sse(*pieces: str) -> bytes:
    """A streamed reply as servers send it: one chat.completion.chunk event per piece, then [DONE]."""
    chunks = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
               "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]  # fmt: skip
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "compile_kernel", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (Behaviour(body=sse("```ptx", "\n"), content_type="text/event-stream"), "answered with a stream"),
        (Behaviour(body=sse("```ptx", "\n")), "answered with a stream"),  # mislabelled as JSON
        (
            Behaviour(content=None, finish_reason="tool_calls", message={"tool_calls": [TOOL_CALL, TOOL_CALL]}),
            "the model called tool compile_kernel (and 1 more call); this mode offers no tools and expects the answer "
            "in the message",
        ),
        (
            Behaviour(content="", reasoning={"reasoning_content": "hmm " * 10}),
            "the reply was empty: the model ended it (finish_reason=stop) without any text, after 40 characters of "
            "reasoning (not read as the answer)",
        ),
    ],
    ids=["sse", "sse-as-json", "tool-calls", "empty"],
)
def test_replies_that_cannot_parse_are_answered_at_once(server: OpenAIServer, behaviour: Behaviour, said: str) -> None:
    server.default = behaviour
    policy, events = make_policy(server)
    reply = policy.respond(MESSAGES, turn=1)
    assert reply.text == "" and said in reply.unreadable
    assert len(server.requests) == 1 and events == []  # no retry


def test_an_empty_reply_cut_at_the_limit_is_a_truncation_not_unreadable(server: OpenAIServer) -> None:
    server.script.append(Behaviour(content="", finish_reason="length"))
    reply = make_policy(server)[0].respond(MESSAGES, turn=1)
    assert reply.unreadable is None and reply.finish_reason == "length"


def test_refusals_are_not_retried(server: OpenAIServer) -> None:
    server.script.extend([Behaviour(status=401), Behaviour(status=400)])
    policy, _ = make_policy(server)
    with pytest.raises(ConfigError, match=r"HTTP 401.*check llm.base_url, llm.model and \$PTXBENCH_TEST_KEY"):
        policy.respond(MESSAGES, turn=1)
    with pytest.raises(ModelError, match="HTTP 400"):
        policy.respond(MESSAGES, turn=1)
    assert len(server.requests) == 2


def test_configuration_errors(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"needs llm\.model"):
        OpenAIPolicy(OpenAIConfig(base_url=server.base_url, api_key_env=KEY_ENV), Recorder())
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"\\${KEY_ENV}, which is not set"):
        OpenAIPolicy(OpenAIConfig(base_url=server.base_url, model="m", api_key_env=KEY_ENV), Recorder())


def llm_args(server: OpenAIServer, runs_dir: Path) -> list[str]:
    return ["task=gemm", "arch=sm_90a", "llm=openai", f"llm.base_url={server.base_url}", "llm.model=test-model",
            f"llm.api_key_env={KEY_ENV}", "llm.backoff_s=0.01", f"runs_dir={runs_dir}", "eval.gpu=false"]  # fmt: skip


def test_run_through_the_loop(server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture) -> None:
    """A truncated answer goes back as a truncation error; a retry is logged; the key is never written."""
    server.script.extend([
        Behaviour(content="```ptx\n.version 8.0\n.target sm_90a\n", finish_reason="length"),
        Behaviour(status=429),
        Behaviour(content=fixture_text("fill_ok.md"), reasoning={"reasoning_content": "fix: shorter"}),
    ])  # fmt: skip
    code, folder = solve([*llm_args(server, runs_dir), "max_turns=2"])
    assert code == 0
    turns = folder.turns()
    assert [t.evaluation.status.value for t in turns] == ["extract_error", "unverified"]
    assert "cut off at the output token limit" in turns[1].messages[-1].content
    assert turns[1].reasoning == "fix: shorter"
    assert turns[1].prompt_tokens == 1234  # the server's usage, not our estimate
    assert f"llm: openai test-model at {server.base_url}" in capsys.readouterr().err
    events = [json.loads(line) for line in folder.events_path.read_text().splitlines()]
    assert [e["event"] for e in events].count("llm.retry") == 1
    for name in ("config.json", "events.log", "trajectory.jsonl", "summary.json"):
        assert SECRET not in (folder.path / name).read_text()
    assert json.loads((folder.path / "config.json").read_text())["llm"]["api_key_env"] == KEY_ENV


def test_unparseable_replies_end_their_turn_with_the_cause(server: OpenAIServer, runs_dir: Path) -> None:
    """Through the loop: each is one turn, recorded, whose feedback is the cause in one line; the run goes on."""
    server.script.extend([
        Behaviour(body=sse("hello"), content_type="text/event-stream"),
        Behaviour(content=None, finish_reason="tool_calls", message={"tool_calls": [TOOL_CALL]}),
        Behaviour(content=""),
        Behaviour(content=fixture_text("fill_ok.md")),
    ])  # fmt: skip
    code, folder = solve([*llm_args(server, runs_dir), "max_turns=4"])
    assert code == 0 and len(server.requests) == 4
    turns = folder.turns()
    assert [t.evaluation.status.value for t in turns] == ["extract_error"] * 3 + ["unverified"]
    feedback = [t.messages[-1].content for t in turns[1:]]
    assert "the endpoint answered with a stream (server-sent events)" in feedback[0]
    assert "the model called tool compile_kernel; this mode offers no tools" in feedback[1]
    assert "the reply was empty: the model ended it (finish_reason=stop) without any text; write" in feedback[2]
    assert [t.evaluation.message.count("\n") for t in turns[:3]] == [0, 0, 0]  # one line each


def test_streaming_is_refused_at_start(server: OpenAIServer, runs_dir: Path, capsys: pytest.CaptureFixture) -> None:
    code = main([*llm_args(server, runs_dir), "llm.extra.stream=true"])
    assert code == 2 and server.requests == []
    assert "llm.extra.stream=true is refused: the loop reads each reply whole" in capsys.readouterr().err


def test_endpoint_down_stops_the_run_resumably(server: OpenAIServer, runs_dir: Path) -> None:
    server.default = Behaviour(status=502)
    code, folder = solve([*llm_args(server, runs_dir), "llm.retries=1", "run_id=down", "max_turns=1"])
    assert code == 1
    summary = folder.summary()
    assert summary.stop_reason == "model_error" and "HTTP 502" in summary.stop_detail
    assert folder.turns() == []
    server.default = Behaviour(content="no kernel today")
    code, folder = solve(["resume=down", f"runs_dir={runs_dir}", "llm.retries=0"])
    assert code == 0
    assert [t.response for t in folder.turns()] == ["no kernel today"]
    assert folder.summary().stop_reason == "max_turns"
