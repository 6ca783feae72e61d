"""`python -m agent.export_sft DIR format=tools`: a tools-mode run that submitted a passing answer, exported as the
tool-calling conversation it was (OpenAI's chat format with `tool_calls` and `tool` messages, the schemas in
`tools`), which the openai SDK's message types accept and Qwen3's chat template (TRL's copy) renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.export_sft import main
from agent.loop.toolcalls import TOOLS
from tests.agent.helpers import RecordedGpu, answer_replaying, fixture_text, solve, write_script


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    root = tmp_path_factory.mktemp("tools-sft")
    fast = answer_replaying("passed_fast")
    replies = [
        {"reasoning": "Check it assembles first.", "tool_calls": [
            {"name": "compile", "arguments": {"answer": fixture_text("fill_typo.md")}},
            {"name": "evaluate", "arguments": "{not json"}]},
        {"text": "Fixed the typo.", "tool_calls": [{"name": "evaluate", "arguments": {"answer": fast}}]},
        {"tool_calls": [{"name": "submit", "arguments": {"answer": fast}}]},
    ]  # fmt: skip
    never = [{"tool_calls": [{"name": "evaluate", "arguments": {"answer": fast}}]}]
    for run_id, script in (("submitted", replies), ("never", never)):
        path = write_script(root / f"{run_id}.json", script)
        code, _ = solve(["task=gemm", "arch=sm_90a", "mode=tools", "llm=scripted", f"llm.path={path}",
                         f"runs_dir={root / 'runs'}", f"run_id={run_id}"], gpu=RecordedGpu())  # fmt: skip
        assert code == 0
    assert main([str(root / "runs"), "format=tools", f"out={root / 'tools.jsonl'}"]) == 0
    card = (root / "tools.card.md").read_text()
    assert "**Format: tools**" in card and '{"messages": [...], "tools": [...], "metadata": {...}}' in card
    return [json.loads(line) for line in (root / "tools.jsonl").read_text().splitlines()]


def test_the_conversation_as_the_model_held_it(exported: list[dict]) -> None:
    (line,) = exported  # the run that never submitted gives none
    assert line["tools"] == TOOLS and line["metadata"]["format"] == "tools"
    messages = line["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool"]
    first = messages[2]
    assert first["content"].startswith("<think>\nCheck it assembles first.\n</think>")
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["compile", "evaluate"]
    assert first["tool_calls"][1]["function"]["arguments"] == "{not json"  # as the model wrote it
    assert messages[3]["tool_call_id"] == first["tool_calls"][0]["id"] and "COMPILE_ERROR" in messages[3]["content"]
    assert "are not JSON" in messages[4]["content"]
    assert messages[-1]["content"].endswith("Submitted: the run ends with this answer.")
    assert all(m["weight"] == 1 for m in messages if m["role"] == "assistant")


def test_the_openai_message_types_accept_it(exported: list[dict]) -> None:
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    messages = [{k: v for k, v in m.items() if k != "weight"} for m in exported[0]["messages"]]
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)


def test_qwen3s_chat_template_renders_the_calls_and_results(exported: list[dict], tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from transformers import AutoTokenizer

    from agent.sft.tiny import model_folder

    tok = AutoTokenizer.from_pretrained(model_folder(tmp_path / "tiny", ["a b c"], chat_template=True))
    line = exported[0]
    text = tok.apply_chat_template(line["messages"], tools=line["tools"], tokenize=False)
    assert text.count('<tool_call>\n{"name": "') == 4 and text.count("<tool_response>") == 4
    assert '"name": "submit"' in text and "# Tools" in text
