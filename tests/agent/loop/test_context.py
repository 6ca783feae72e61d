"""The conversation within a context window: history modes (full, last, digest), the guard that lowers max_tokens
and then compacts older attempts, a length refusal from the endpoint compacted and retried once, and runs over a
local OpenAI-compatible server that refuses over-long requests as vLLM does (counting tokens as the loop does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.loop.conversation import DIGEST_HEADING, build_messages, fit
from agent.loop.tokens import count_messages
from tests.agent.helpers import solve
from tests.agent.openai_server import Behaviour, OpenAIServer
from tools.evaluation import Status

KEY_ENV = "PTXBENCH_TEST_KEY"
HISTORY = [
    {"turn": i, "response": f"answer {i} " + "word " * 400, "feedback": f"feedback {i} " + "note " * 200,
     "outcome": f"turn {i}: compile_error at compile: line {i}: error"}
    for i in range(1, 5)
]  # fmt: skip
# A kernel for the attention task that the static stages accept (it only fills O), with a design note padding it
# to the size of a real answer: every attempt is unverified without a GPU.
ATTENTION_ANSWER = """A first attention kernel: one thread per element of O, zeros for now. {padding}

```ptx
.version 8.0
.target sm_90a
.address_size 64

.visible .entry fill_o(.param .u64 o, .param .u32 n)
.reqntid 256, 1, 1
{{
    .reg .pred %p;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    .reg .b16 %h;
    ld.param.u64 %rd1, [o];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r2, 256, %r3;
    setp.ge.u32 %p, %r4, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r4, 2;
    add.s64 %rd3, %rd1, %rd2;
    mov.b16 %h, 0;
    st.global.b16 [%rd3], %h;
DONE:
    ret;
}}
```

```json
{{"launches": [{{"kernel": "fill_o", "grid": ["cdiv(B*H*S*D,256)", 1, 1], "block": [256, 1, 1],
  "args": [{{"tensor": "O"}}, {{"scalar": "B*H*S*D", "type": "u32"}}]}}]}}
```
""".format(padding="The next turns add the softmax, the TMA ring and the wgmma pipeline. " * 40)


def test_history_modes() -> None:
    full = build_messages("sys", "task", HISTORY, "full")
    assert [m.role for m in full] == ["system", "user", *["assistant", "user"] * 4]
    last = build_messages("sys", "task", HISTORY, "last")
    assert [m.content[:8] for m in last[2:]] == ["answer 4", "feedback"]
    digest = build_messages("sys", "task", HISTORY, "digest")
    assert len(digest) == 4 and digest[2].content.startswith("answer 4") and digest[3].content.startswith("feedback 4")
    assert digest[1].content.startswith("task\n\n" + DIGEST_HEADING + "\n\n- turn 1: compile_error at compile: line 1")
    assert digest[1].content.count("\n- turn ") == 3
    # Without recorded outcomes (a checkpoint from before digests) the feedback's first line stands in.
    old = [{k: v for k, v in e.items() if k != "outcome"} for e in HISTORY]
    assert "- feedback 1 note note" in build_messages("sys", "task", old, "digest")[1].content


def test_the_guard_lowers_max_tokens_then_compacts_the_oldest_attempts() -> None:
    whole = count_messages(build_messages("sys", "task", HISTORY, "full"))
    roomy = fit("sys", "task", HISTORY, "full", context_tokens=whole + 9000, max_tokens=8000, floor=1000)
    assert (roomy.max_tokens, roomy.lowered_from, roomy.compacted, roomy.fits) == (8000, None, 0, True)
    lowered = fit("sys", "task", HISTORY, "full", context_tokens=whole + 3000, max_tokens=8000, floor=1000)
    assert (lowered.max_tokens, lowered.lowered_from, lowered.compacted) == (3000, 8000, 0)
    tight = fit("sys", "task", HISTORY, "full", context_tokens=whole + 500, max_tokens=8000, floor=1000)
    assert tight.fits and tight.compacted == 1 and tight.prompt_tokens + tight.max_tokens <= whole + 500
    assert tight.max_tokens >= 1000 and tight.messages[2].content.startswith("answer 2")  # turn 1 is now a line
    hopeless = fit("sys", "task", HISTORY, "full", context_tokens=500, max_tokens=8000, floor=1000)
    assert not hopeless.fits and hopeless.compacted == 3  # the last attempt is never compacted
    assert fit("sys", "task", HISTORY, "full", context_tokens=None, max_tokens=8000, floor=1000).max_tokens == 8000


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "EMPTY")


def attention_run(runs_dir: Path, server: OpenAIServer, *extra: str, prompt: str = "base"):
    """A run on the attention task with the base knowledge pack (the full one alone is ~11k tokens)."""
    return solve(["task=mha_with_lse_d128", "arch=sm_90a", "llm=openai", "llm.model=test-model",
                  f"llm.base_url={server.base_url}", f"llm.api_key_env={KEY_ENV}", "llm.backoff_s=0.01",
                  "llm.retries=0", f"prompt={prompt}", "eval.gpu=false", f"runs_dir={runs_dir}", *extra])  # fmt: skip


def events(folder) -> list[dict]:
    return [json.loads(line) for line in folder.events_path.read_text().splitlines()]


def test_eight_unverified_turns_on_the_attention_task_within_16000_tokens(tmp_path: Path, key) -> None:
    with OpenAIServer(context_tokens=16000) as server:
        server.default = Behaviour(content=ATTENTION_ANSWER)
        code, folder = attention_run(tmp_path, server, "llm.context_tokens=16000", "unverified_turns=8",
                                     "max_turns=8")  # fmt: skip
    turns = folder.turns()
    assert code == 0 and len(turns) == 8, folder.events_path.read_text()[-2000:]
    assert [t.evaluation.status for t in turns] == [Status.UNVERIFIED] * 8
    assert server.refused == 0 and all(t.finish_reason == "stop" for t in turns)  # no length error of any kind
    for request in server.requests:
        sent = count_messages([type(turns[0].messages[0])(**m) for m in request["body"]["messages"]])
        assert sent + request["body"]["max_completion_tokens"] <= 16000
    names = [e["event"] for e in events(folder)]
    assert "llm.max_tokens_lowered" in names and "conversation.compacted" in names
    assert DIGEST_HEADING in turns[-1].messages[1].content  # the oldest attempts as lines, the last one whole
    assert folder.summary().stop_reason == "max_turns"


def test_a_length_refusal_is_compacted_and_asked_once_more(tmp_path: Path, key) -> None:
    # The endpoint's tokenizer counts 1,000 more than ours: the first request that leaves no margin is refused.
    with OpenAIServer(context_tokens=16000, extra_prompt_tokens=1000) as server:
        server.default = Behaviour(content=ATTENTION_ANSWER)
        code, folder = attention_run(tmp_path, server, "llm.context_tokens=16000", "unverified_turns=3",
                                     "max_turns=3")  # fmt: skip
    assert code == 0 and len(folder.turns()) == 3 and server.refused >= 1
    refused = [e for e in events(folder) if e["event"] == "llm.context_refused"]
    assert refused and refused[0]["limit"] == 16000 and refused[0]["retry_context_tokens"] < 16000


def test_a_second_refusal_stops_the_run_resumably(tmp_path: Path, key) -> None:
    with OpenAIServer(context_tokens=16000, extra_prompt_tokens=12000) as server:  # nothing ever fits
        server.default = Behaviour(content=ATTENTION_ANSWER)
        code, folder = attention_run(tmp_path, server, "max_turns=2")
    summary = folder.summary()
    assert code == 1 and summary.stop_reason == "model_error" and folder.turns() == []
    assert "too long" in summary.stop_detail or "leaves fewer than" in summary.stop_detail


def test_a_prompt_that_cannot_fit_says_what_to_change(tmp_path: Path, key) -> None:
    with OpenAIServer() as server:
        code, folder = attention_run(tmp_path, server, "llm.context_tokens=8000", prompt="full")
    detail = folder.summary().stop_detail
    assert code == 1 and "leaves fewer than llm.min_output_tokens=4,096 of llm.context_tokens=8,000" in detail
    assert server.requests == []  # refused before anything was sent
