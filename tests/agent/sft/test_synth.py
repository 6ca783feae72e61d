"""`python -m agent.synth_reasoning` on the exported fixtures, against the local OpenAI-compatible test server:
the real openai client over real HTTP, through the repair loop's own policy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.loop.records import Message
from agent.loop.tokens import count_messages, count_text
from agent.sft import data
from agent.synth_reasoning import main
from tests.agent.openai_server import Behaviour, OpenAIServer
from tests.agent.sft.conftest import FIXIT, KERNELGEN
from tools.answer import extract_solution

KEY_ENV = "PTXBENCH_TEST_KEY"
SECRET = "sk-test-secret-77c1"
REPO = Path(__file__).resolve().parents[3]
PROMPTS = REPO / "prompts" / "reasoning"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with OpenAIServer() as s:
        yield s


def synth(server: OpenAIServer, source: Path, out: Path, *words: str, model: str | None = "teacher") -> int:
    endpoint = [f"llm.base_url={server.base_url}", f"llm.api_key_env={KEY_ENV}", "llm.retries=1", "llm.backoff_s=0.01"]
    named = [f"llm.model={model}"] if model else []
    return main([str(source), "llm=openai", *named, *endpoint, f"out={out}", *words])


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_fills_in_missing_reasoning_from_the_failure_and_its_log(server: OpenAIServer, tmp_path: Path) -> None:
    server.default = Behaviour(content="The log says half of C was never written: the grid covers one half.")
    out = tmp_path / "fixit.jsonl"
    assert synth(server, FIXIT, out) == 0
    before, after = read(FIXIT), read(out)
    assert [line["metadata"]["id"] for line in after] == [line["metadata"]["id"] for line in before]
    (asked,) = server.requests  # only gemm-mismatch's pair had no reasoning
    new = next(line for line in after if line["metadata"]["reasoning"]["source"] == "synthesized")
    old = next(line for line in before if line["metadata"]["id"] == new["metadata"]["id"])
    assert new["metadata"]["id"] == "gemm-mismatch/turn_02"
    system, user = asked["body"]["messages"]
    assert system == {"role": "system", "content": (PROMPTS / "system.md").read_text()}
    failed, log = old["messages"][2]["content"], old["messages"][3]["content"]
    assert all(m["content"] in user["content"] for m in old["messages"])  # prompts, attempt, log, answer
    assert user["content"].index(failed) < user["content"].index(log) < user["content"].index("## The repaired answer")
    assert new["messages"][:-1] == old["messages"][:-1]
    reasoning = server.default.content
    assert new["messages"][-1]["content"] == f"<think>\n{reasoning}\n</think>\n\n{old['messages'][-1]['content']}"
    assert new["metadata"]["reasoning"] == {
        "source": "synthesized", "model": "teacher", "tokens": count_text(reasoning), "replaced": False
    }  # fmt: skip
    assert new["metadata"]["tokens"] == count_messages([Message(**{k: m[k] for k in ("role", "content")})
                                                        for m in new["messages"]])  # fmt: skip
    for line in after:
        if line is not new:
            recorded = next(b for b in before if b["metadata"]["id"] == line["metadata"]["id"])
            assert line == {**recorded, "metadata": {**recorded["metadata"], "reasoning": {
                "source": "recorded", "model": recorded["metadata"]["answer"]["model"]}}}  # fmt: skip


def test_replace_rewrites_every_rationale_and_never_the_kernel(server: OpenAIServer, tmp_path: Path) -> None:
    server.default = Behaviour(content="Fresh reasoning.")
    for source in (FIXIT, KERNELGEN):
        out = tmp_path / source.name
        assert synth(server, source, out, "replace=true", "concurrency=3") == 0
        before, after = read(source), read(out)
        assert len(after) == len(before)
        for old, new in zip(before, after, strict=True):
            old_reasoning, old_answer = data.split_answer(old["messages"][-1]["content"])
            new_reasoning, new_answer = data.split_answer(new["messages"][-1]["content"])
            assert new_reasoning == "Fresh reasoning." and new_answer == old_answer
            assert extract_solution(new_answer) == extract_solution(old_answer)  # source and launch spec
            assert new["metadata"]["reasoning"]["replaced"] is (old_reasoning is not None)
    recorded = [data.split_answer(line["messages"][-1]["content"])[0] for line in read(FIXIT)]
    asked = " ".join(r["body"]["messages"][1]["content"] for r in server.requests)
    assert all(r is None or r not in asked for r in recorded)  # the old rationale is not shown to the model
    assert sum("The failed attempt" in r["body"]["messages"][1]["content"] for r in server.requests) == 3


def test_rationales_that_cannot_be_kept_are_dropped_and_counted(server: OpenAIServer, tmp_path: Path) -> None:
    server.script.extend([
        Behaviour(content="long " * 80),
        Behaviour(content="First the loop:\n```ptx\nret;\n```"),
        Behaviour(content="I was cut", finish_reason="length"),
        Behaviour(content="one </think> two"),
        Behaviour(content="<think>\nShort and right.\n</think>"),
    ])  # fmt: skip
    out = tmp_path / "gen.jsonl"
    assert synth(server, KERNELGEN, out, "replace=true", "concurrency=1", "max_reasoning_tokens=50") == 0
    (kept,) = read(out)
    assert kept["metadata"]["id"] == read(KERNELGEN)[4]["metadata"]["id"]
    assert data.split_answer(kept["messages"][-1]["content"])[0] == "Short and right."
    card = json.loads(out.with_name("gen.card.json").read_text())
    assert card["reasoning"] == {
        "model": "teacher", "replace": True, "max_reasoning_tokens": 50, "synthesized": 1, "kept_as_recorded": 0,
        "dropped": {"too_long": 1, "code_block": 1, "truncated": 1, "malformed": 1},
    }  # fmt: skip
    assert card["funnel"][-1] == {"name": "synth_reasoning", "removed": 4, "kept": 1, "file": "train"}
    assert card["files"]["train"]["examples"] == 1 and card["files"]["train"]["path"] == "gen.jsonl"


def test_the_output_is_exported_data_with_its_own_card(server: OpenAIServer, tmp_path: Path) -> None:
    out = tmp_path / "fixit.jsonl"
    assert synth(server, FIXIT, out) == 0
    loaded = data.load(out)  # what agent.train_sft reads: the card matches the file
    assert loaded.formats == {"fixit"} and len(loaded.records) == 3
    card, source = loaded.card, json.loads(FIXIT.with_name("fixit.card.json").read_text())
    relative = os.path.relpath(FIXIT, tmp_path)  # a card names paths relative to its own folder
    assert card["derived_from"] == {"path": relative, "command": source["command"]}
    assert card["command"].startswith(f"python -m agent.synth_reasoning {relative} llm=openai llm.model=teacher")
    assert card["funnel"][:-1] == source["funnel"] and card["reasoning"]["model"] == "teacher"
    assert card["files"]["train"]["by_error_class"] == source["files"]["train"]["by_error_class"]
    text = out.with_name("fixit.card.md").read_text()
    assert "## Reasoning" in text and "Synthesized by `teacher`" in text
    assert "| synth_reasoning | train | 0 | 3 |" in text


def test_the_api_key_is_used_and_never_written(
    server: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "fixit.jsonl"
    assert synth(server, FIXIT, out, "replace=true") == 0
    assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    printed = capsys.readouterr()
    for text in (printed.out, printed.err, *(p.read_text() for p in tmp_path.iterdir())):
        assert SECRET not in text


def test_an_endpoint_that_keeps_failing_writes_nothing(
    server: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    server.default = Behaviour(status=503)
    assert synth(server, FIXIT, tmp_path / "out.jsonl") == 1
    err = capsys.readouterr().err
    assert "turn 2: HTTP 503: Error code: 503 - scripted 503; retry 1 of 1" in err
    assert err.splitlines()[-1].startswith("error: openai teacher at ")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no_key", f"reads its API key from ${KEY_ENV}, which is not set"),
        ("no_model", "llm=openai needs llm.model=NAME"),
        ("same_file", "is the input file"),
        ("refused", "refused the request (HTTP 404"),
        ("no_card", "no data card beside it"),
        ("not_jsonl", "out: must name a .jsonl file"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, case: str, message: str
) -> None:
    source, out, model = FIXIT, tmp_path / "out.jsonl", "teacher"
    if case == "no_key":
        monkeypatch.delenv(KEY_ENV)
    elif case == "no_model":
        model = None
    elif case == "same_file":
        shutil.copy(FIXIT, tmp_path / "fixit.jsonl")
        shutil.copy(FIXIT.with_name("fixit.card.json"), tmp_path / "fixit.card.json")
        source = out = tmp_path / "fixit.jsonl"
    elif case == "refused":
        server.default = Behaviour(status=404)
    elif case == "no_card":
        source = tmp_path / "bare.jsonl"
        shutil.copy(FIXIT, source)
    else:
        out = tmp_path / "out.json"
    assert synth(server, source, out, model=model) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out.jsonl").exists()


def test_help_and_a_bad_setting_from_the_command_line() -> None:
    run = [sys.executable, "-m", "agent.synth_reasoning"]
    shown = subprocess.run([*run, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stderr == ""
    rows = {line.split()[0]: line.rstrip() for line in shown.stdout.splitlines() if line.startswith("  ")}
    assert rows["max_reasoning_tokens"].endswith("[8192]") and rows["replace"].endswith("[false]")
    assert rows["llm.api_key_env"].endswith("[OPENAI_API_KEY]") and "llm.model" in rows and "DATA.jsonl" in rows
    refused = subprocess.run([*run, str(FIXIT), "llm.modle=M"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: unknown setting llm.modle; did you mean llm.model?")
    assert refused.stderr.count("\n") == 1
