"""Replies no model should send, but servers do: lone surrogates (JSON escapes no UTF-8 file can hold) and
replies of tens of megabytes. Each is recorded exactly or reversibly, the run goes on, and nothing grows
without bound: not the trajectory, not the checkpoints, not the next prompt."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.export_sft import main as export_sft
from agent.loop import reply as replies
from agent.loop.store import RunFolder
from agent.solve import main as solve
from tests.adversarial.helpers import fill_ok
from tests.agent.helpers import RecordedGpu, answer_replaying
from tests.agent.helpers import solve as solve_with_gpu
from tests.agent.openai_server import Behaviour, OpenAIServer

KEY_ENV = "PTXBENCH_ADVERSARIAL_KEY"


def scripted(tmp_path: Path, runs_dir: Path, run_id: str, answers: list[str], *extra: str) -> list[str]:
    script = tmp_path / f"{run_id}.json"
    script.write_text(json.dumps(answers))  # json.dumps writes a lone surrogate as the escape \ud800
    return ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", "eval.gpu=false",
            "unverified_turns=8", f"runs_dir={runs_dir}", f"run_id={run_id}", *extra]  # fmt: skip


def test_escape_is_reversible() -> None:
    text = "a\ud800b\udfffc\U0001f600"
    escaped, found = replies.escape(text)
    assert escaped == "a\ufffdb\ufffdc\U0001f600" and found == [(1, 0xD800), (3, 0xDFFF)]
    assert replies.restore(escaped, found) == text


def test_a_lone_surrogate_is_recorded_reversibly_and_resumed_exactly(runs_dir: Path, tmp_path: Path) -> None:
    reply = fill_ok().replace("deliberately simple", "deliberately \ud800 simple")
    assert solve(scripted(tmp_path, runs_dir, "surrogate", [reply, reply], "max_turns=1")) == 0
    assert solve(["resume=surrogate", f"runs_dir={runs_dir}", "max_turns=2"]) == 0  # history from the checkpoint
    first, second = RunFolder(runs_dir / "surrogate").turns()
    assert first.evaluation.status.value == "unverified"  # the run went on: it was evaluated
    assert replies.restore(first.response, first.lone_surrogates["response"]) == reply
    assert second.messages[2].content == first.response  # as recorded, not with a '?' from the checkpoint
    attempt = runs_dir / "surrogate" / "attempts" / "turn_01.response.md"
    assert attempt.read_text(encoding="utf-8") == first.response


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    monkeypatch.setenv(KEY_ENV, "EMPTY")
    with OpenAIServer() as s:
        yield s


def test_a_lone_surrogate_from_an_endpoint(server: OpenAIServer, runs_dir: Path) -> None:
    server.default = Behaviour(content=fill_ok() + "\ud83d", reasoning={"reasoning_content": "hm \udc00"})
    args = ["task=gemm", "arch=sm_90a", "llm.model=m", f"llm.base_url={server.base_url}", f"llm.api_key_env={KEY_ENV}",
            "max_turns=1", "eval.gpu=false", f"runs_dir={runs_dir}", "run_id=endpoint"]  # fmt: skip
    assert solve(args) == 0
    (turn,) = RunFolder(runs_dir / "endpoint").turns()
    assert replies.restore(turn.response, turn.lone_surrogates["response"]).endswith("\ud83d")
    assert replies.restore(turn.reasoning, turn.lone_surrogates["reasoning"]) == "hm \udc00"


def test_oversized_replies_are_kept_once_and_cut_everywhere_else(runs_dir: Path, tmp_path: Path) -> None:
    # 40 MB replies once made a 1.9 GB run folder in 3 turns; over the 8 MB answer cap, one is refused
    # (and still kept); under it, one is extracted from the whole text, though the records hold its head.
    huge, big = fill_ok() + "\nNotes:\n" + "x" * (12 << 20), fill_ok() + "\nNotes:\n" + "x" * (3 << 20)
    assert solve(scripted(tmp_path, runs_dir, "huge", [huge, big, big], "max_turns=3")) == 0
    folder = runs_dir / "huge"
    turns = RunFolder(folder).turns()
    assert [t.evaluation.status.value for t in turns] == ["extract_error", "unverified", "unverified"]
    assert "larger than 8 MB" in turns[0].evaluation.message
    for turn, text in zip(turns, (huge, big, big), strict=True):
        (cut,) = turn.cuts
        raw = text.encode()
        assert (cut.field, cut.bytes, cut.sha256) == ("response", len(raw), hashlib.sha256(raw).hexdigest())
        assert gzip.decompress((folder / cut.archive).read_bytes()) == raw  # whole, once, beside the run
        assert turn.response == text[: replies.HEAD_CHARS] + replies.marker(cut)
    assert turns[2].messages[-2].content == turns[1].response  # the next prompt gets the head and the note
    assert (folder / "trajectory.jsonl").stat().st_size < 1 << 20
    assert (folder / "checkpoints.sqlite").stat().st_size < 4 << 20
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 8 << 20


def test_sft_export_skips_cut_turns(runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    small, big = answer_replaying("passed_fast"), answer_replaying("passed_fast") + "z" * (2 << 20)
    for run_id, text in (("small", small), ("big", big)):
        code, _ = solve_with_gpu(scripted(tmp_path, runs_dir, run_id, [text], "max_turns=1"), gpu=RecordedGpu())
        assert code == 0
    out = tmp_path / "kernelgen.jsonl"
    assert export_sft([str(runs_dir), "format=kernelgen", f"out={out}", "dedup=false"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["metadata"]["answer"]["run_id"] for line in lines] == ["small"]


def test_a_data_card_records_no_path_of_the_exporting_machine(
    runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, _ = solve_with_gpu(scripted(tmp_path, runs_dir, "good", [answer_replaying("passed_fast")], "max_turns=1"),
                             gpu=RecordedGpu())  # fmt: skip
    assert code == 0
    (runs_dir / "broken").mkdir()
    (runs_dir / "broken" / "config.json").write_text("{not json")
    (runs_dir / "broken" / "trajectory.jsonl").write_text("")
    out = tmp_path / "data" / "kernelgen.jsonl"
    assert export_sft([str(runs_dir), "format=kernelgen", f"out={out}", "dedup=false"]) == 0
    card = json.loads(out.with_suffix(".card.json").read_text())
    assert card["runs_skipped"] and card["command"].endswith("../runs format=kernelgen out=kernelgen.jsonl dedup=false")
    for written in (out.with_suffix(".card.json"), out.with_suffix(".card.md")):
        assert str(tmp_path) not in written.read_text()
