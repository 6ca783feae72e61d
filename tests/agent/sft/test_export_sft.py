"""`python -m agent.export_sft` on a corpus of run folders written through agent.loop.store from real Turn
objects (messages built by the loop's own build_messages, a seeded run by agent.loop.seed), each expectation
worked out by hand from the corpus below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.export_sft import main
from agent.loop.config import SeedConfig
from agent.loop.conversation import build_messages
from agent.loop.records import Turn
from agent.loop.seed import load_seed
from agent.loop.store import RunFolder
from agent.loop.tokens import count_text
from tasks.catalog import get_task
from tasks.schema import Arch
from tests.agent.helpers import fixture_text
from tools import pipeline
from tools.answer import AnswerError, extract_solution
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status

REPO = Path(__file__).resolve().parents[3]
GEMM, ATTN = "gemm_n7168_k5120", "mha_with_lse_d128"
RECORDED = {k: Evaluation.model_validate(v) for k, v in json.loads(fixture_text("evaluations.json")).items()}
LONG_REASONING = "step " * 1500  # puts r4's pair well over a 1,200-token cap


@dataclass
class Attempt:
    response: str
    status: str  # a recorded evaluation's name, or compile_error / extract_error / unverified
    reasoning: str | None = None


def answer(tag: str, *, noise: bool = False) -> str:
    """fill_ok.md with its kernel renamed fill_<tag> (a distinct solution per tag); `noise` changes only
    comments and whitespace, so the answer is the same solution."""
    text = fixture_text("fill_ok.md").replace("fill_kernel", f"fill_{tag}")
    if noise:
        text = text.replace("    ret;", "    // done\n    ret;   ").replace(".target sm_90a", ".target  sm_90a /* a */")
    return text


def evaluation(status: str, task: str, arch: str) -> Evaluation:
    if status == "compile_error":
        stages = [
            StageResult(name=Stage.EXTRACT, state=StageState.PASSED),
            StageResult(name=Stage.COMPILE, state=StageState.FAILED, message="line 16: unknown instruction"),
        ]
        return Evaluation(task=task, arch=arch, status=Status.COMPILE_ERROR, stages=stages)
    if status == "extract_error":
        failed = StageResult(
            name=Stage.EXTRACT, state=StageState.FAILED, message="no ```ptx or ```cuda source block found"
        )
        return pipeline.evaluation(pipeline.Static(stages=[failed]), get_task(task), Arch(arch))
    if status == "unverified":
        return Evaluation(task=task, arch=arch, status=Status.UNVERIFIED)
    return RECORDED[status].model_copy(update={"task": task, "arch": Arch(arch)})


def write_run(
    runs_dir: Path,
    run_id: str,
    task: str,
    arch: str,
    model: str,
    attempts: list[Attempt],
    seed: tuple[str, int] | None = None,
) -> RunFolder:
    """A run folder as the loop writes it (history=full): each turn sent the prompts, then every earlier
    answer and its feedback; a seeded run starts from the seed's prompts, answer and feedback."""
    config = {"task": task, "arch": arch, "llm": {"name": "openai", "model": model}, "policy": f"openai {model}"}
    system, task_text, history = f"You write PTX for {arch}.", f"Write {task}.", []
    if seed is not None:
        found = load_seed(SeedConfig(run=seed[0], turn=seed[1]), runs_dir, get_task(task), Arch(arch))
        config |= {"seed": {"run": str(found.folder.path), "turn": seed[1]}, "seed_attempt": found.record()}
        system, task_text, history = found.system_prompt, found.task_prompt, found.history()
    folder = RunFolder.create(runs_dir, run_id, config)
    for index, a in enumerate(attempts, start=1):
        feedback = f"feedback on {run_id} turn {index}: {a.status}"
        try:
            solution = extract_solution(a.response)
        except AnswerError:
            solution = None
        turn = Turn(
            index=index,
            messages=build_messages(system, task_text, history, "full"),
            response=a.response,
            reasoning=a.reasoning,
            solution=solution,
            evaluation=evaluation(a.status, task, arch),
            feedback=feedback,
            started_at="2025-01-01T00:00:00+00:00",
        )
        folder.append_turn(turn)
        history.append({"turn": index, "response": a.response, "feedback": feedback})
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fixit candidates (failed turn → passed turn): r1 (compile_error), r2 (timeout, after a mismatch),
    r3 (r1 again, but for comments and spaces), r4 (extract_error; its fix misses the targets and its
    reasoning is long), r7 (a teacher repairing r2's timeout). None in r5 (unverified → passed: not known
    to be wrong) or r6 (passed → passed). kernelgen candidates: the eight passed turns, r3's a duplicate."""
    runs = tmp_path_factory.mktemp("corpus") / "runs"
    write_run(runs, "r1", GEMM, "sm_90a", "student-a", [
        Attempt(answer("typo1"), "compile_error"), Attempt(answer("b1"), "passed_fast", "think one"),
    ])  # fmt: skip
    write_run(runs, "r2", GEMM, "sm_90a", "student-b", [
        Attempt(answer("a2"), "mismatch"), Attempt(answer("a3"), "timeout"), Attempt(answer("b2"), "passed_slow"),
    ])  # fmt: skip
    write_run(runs, "r3", GEMM, "sm_90a", "student-a", [
        Attempt(answer("typo1", noise=True), "compile_error"),
        Attempt(answer("b1", noise=True), "passed_fast", "think again"),
    ])  # fmt: skip
    write_run(runs, "r4", ATTN, "sm_100a", "student-a", [
        Attempt("I would write a kernel here.", "extract_error"),
        Attempt(answer("c"), "passed_no_targets", LONG_REASONING),
    ])  # fmt: skip
    write_run(runs, "r5", GEMM, "sm_100a", "student-a", [
        Attempt(answer("e0"), "unverified"), Attempt(answer("e"), "passed_fast"),
    ])  # fmt: skip
    write_run(runs, "r6", GEMM, "sm_90a", "student-b", [
        Attempt(answer("f"), "passed_slow"), Attempt(answer("g"), "passed_fast"),
    ])  # fmt: skip
    write_run(runs, "r7", GEMM, "sm_90a", "teacher-x", [Attempt(answer("d1"), "passed_fast", "teacher thinks")],
              seed=("r2", 2))  # fmt: skip
    return runs


def export(corpus: Path, out: Path, *args: str, fmt: str = "fixit") -> tuple[list[dict], dict]:
    assert main([str(corpus), "--format", fmt, "--out", str(out), *args]) == 0
    return read(out), json.loads(out.with_name(out.stem + ".card.json").read_text())


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def ids(lines: list[dict]) -> list[str]:
    return [line["metadata"]["id"] for line in lines]


def tokens(messages: list[dict]) -> int:
    """tiktoken's count of the contents, plus 4 per message and 2 for the reply, as OpenAI counts a chat."""
    return sum(count_text(m["content"]) + 4 for m in messages) + 2


def test_fixit_pair_is_prompts_failed_attempt_feedback_fix(corpus: Path, tmp_path: Path) -> None:
    lines, _ = export(corpus, tmp_path / "fixit.jsonl")
    pair = next(line for line in lines if line["metadata"]["id"] == "r1/turn_02")
    assert pair["messages"] == [
        {"role": "system", "content": "You write PTX for sm_90a."},
        {"role": "user", "content": f"Write {GEMM}."},
        {"role": "assistant", "content": answer("typo1"), "weight": 0},
        {"role": "user", "content": "feedback on r1 turn 1: compile_error"},
        {"role": "assistant", "content": "<think>\nthink one\n</think>\n\n" + answer("b1"), "weight": 1},
    ]
    assert pair["metadata"] == {
        "id": "r1/turn_02",
        "format": "fixit",
        "task": GEMM,
        "arch": "sm_90a",
        "error_class": "compile_error",
        "speedup": 1.07,
        "targets_met": True,
        "tokens": tokens(pair["messages"]),
        "answer": {"run_id": "r1", "turn": 2, "model": "student-a"},
        "wrong": {"run_id": "r1", "turn": 1, "model": "student-a"},
        "mined": False,
    }


def test_a_pair_holds_only_the_attempt_before_the_fix(corpus: Path, tmp_path: Path) -> None:
    """r2's turn 3 was sent both earlier attempts (history=full); the pair keeps the one it repaired."""
    lines, _ = export(corpus, tmp_path / "fixit.jsonl")
    pair = next(line for line in lines if line["metadata"]["id"] == "r2/turn_03")
    assert [m["content"] for m in pair["messages"][2:]] == [
        answer("a3"), "feedback on r2 turn 2: timeout", answer("b2")
    ]  # fmt: skip
    assert pair["metadata"]["error_class"] == "timeout" and pair["metadata"]["wrong"]["turn"] == 2
    assert len(RunFolder(corpus / "r2").turns()[2].messages) == 6


def test_mined_pair_joins_the_students_failure_to_the_teachers_fix(corpus: Path, tmp_path: Path) -> None:
    lines, _ = export(corpus, tmp_path / "fixit.jsonl")
    pair = next(line for line in lines if line["metadata"]["id"] == "r7/turn_01")
    student = RunFolder(corpus / "r2").turns()[1]
    assert pair["messages"] == [
        {"role": "system", "content": student.messages[0].content},
        {"role": "user", "content": student.messages[1].content},
        {"role": "assistant", "content": answer("a3"), "weight": 0},
        {"role": "user", "content": student.feedback},
        {"role": "assistant", "content": "<think>\nteacher thinks\n</think>\n\n" + answer("d1"), "weight": 1},
    ]
    meta = pair["metadata"]
    assert meta["wrong"] == {"run_id": "r2", "turn": 2, "model": "student-b"}
    assert meta["answer"] == {"run_id": "r7", "turn": 1, "model": "teacher-x"}
    assert meta["mined"] is True and meta["error_class"] == "timeout"


def test_dedup_by_normalised_source(corpus: Path, tmp_path: Path) -> None:
    lines, card = export(corpus, tmp_path / "fixit.jsonl")
    assert ids(lines) == ["r1/turn_02", "r2/turn_03", "r7/turn_01", "r4/turn_02"]  # r3 = r1 up to comments/spaces
    assert card["funnel"] == [
        {"name": "candidates", "removed": 0, "kept": 5, "file": "all"},
        {"name": "dedup", "removed": 1, "kept": 4, "file": "all"},
    ]
    everything, _ = export(corpus, tmp_path / "all.jsonl", "--no-dedup")
    assert ids(everything) == ["r1/turn_02", "r2/turn_03", "r3/turn_02", "r7/turn_01", "r4/turn_02"]


@pytest.mark.parametrize(
    ("args", "kept", "step"),
    [
        (["--require-targets"], ["r1/turn_02", "r2/turn_03", "r7/turn_01"], ("require_targets", 1)),
        (["--min-speedup", "1.0"], ["r1/turn_02", "r7/turn_01", "r4/turn_02"], ("min_speedup", 1)),
        (["--max-tokens", "1200"], ["r1/turn_02", "r2/turn_03", "r7/turn_01"], ("max_tokens", 1)),
    ],
)
def test_quality_and_length_filters(
    corpus: Path, tmp_path: Path, args: list[str], kept: list[str], step: tuple[str, int]
) -> None:
    lines, card = export(corpus, tmp_path / "fixit.jsonl", *args)
    assert ids(lines) == kept
    assert {(s["name"], s["removed"]) for s in card["funnel"]} >= {step}


def test_token_cap_counts_the_whole_example(corpus: Path, tmp_path: Path) -> None:
    lines, _ = export(corpus, tmp_path / "fixit.jsonl")
    sizes = {line["metadata"]["id"]: tokens(line["messages"]) for line in lines}
    assert sizes == {line["metadata"]["id"]: line["metadata"]["tokens"] for line in lines}
    assert sizes["r4/turn_02"] > 1200 >= max(v for k, v in sizes.items() if k != "r4/turn_02")
    capped, _ = export(corpus, tmp_path / "capped.jsonl", "--max-tokens", str(sizes["r1/turn_02"]))
    assert ids(capped) == [k for k, v in sizes.items() if v <= sizes["r1/turn_02"]]


def test_caps_per_task_and_error_class(corpus: Path, tmp_path: Path) -> None:
    lines, card = export(corpus, tmp_path / "a.jsonl", "--max-per-task", "2")
    tasks = [line["metadata"]["task"] for line in lines]
    assert (tasks.count(GEMM), tasks.count(ATTN)) == (2, 1)
    assert card["funnel"][-1] == {"name": "max_per_task", "removed": 1, "kept": 3, "file": "train"}
    again, _ = export(corpus, tmp_path / "b.jsonl", "--max-per-task", "2")
    assert again == lines  # the same seed keeps the same examples
    lines, card = export(corpus, tmp_path / "c.jsonl", "--max-per-error-class", "1")
    classes = sorted(line["metadata"]["error_class"] for line in lines)
    assert classes == ["compile_error", "extract_error", "timeout"]  # r2 and r7 both repair a timeout
    assert card["funnel"][-1] == {"name": "max_per_error_class", "removed": 1, "kept": 3, "file": "train"}
    kept_by_seed = {tuple(ids(export(corpus, tmp_path / f"s{s}.jsonl", "--max-per-task", "1", "--seed", str(s))[0]))
                    for s in range(8)}  # fmt: skip
    assert all(len(k) == 2 and k[1] == "r4/turn_02" for k in kept_by_seed)  # the only attention pair
    assert {k[0] for k in kept_by_seed} == {"r1/turn_02", "r2/turn_03", "r7/turn_01"}  # the seed picks the gemm one


def test_holdout_tasks_go_to_their_own_file(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixit.jsonl"
    lines, card = export(corpus, out, "--holdout-tasks", "attn_fwd")
    assert ids(lines) == ["r1/turn_02", "r2/turn_03", "r7/turn_01"]
    assert ids(read(tmp_path / "fixit.holdout.jsonl")) == ["r4/turn_02"]
    assert card["held_out_tasks"] == [ATTN] and card["filters"]["holdout_tasks"] == [ATTN]
    assert {k: v["examples"] for k, v in card["files"].items()} == {"train": 3, "holdout": 1}
    assert card["files"]["holdout"]["path"] == "fixit.holdout.jsonl"


def test_split_by_task_is_seeded(corpus: Path, tmp_path: Path) -> None:
    splits = set()
    for seed in range(6):
        out = tmp_path / f"s{seed}.jsonl"
        lines, card = export(corpus, out, "--split-by-task", "0.5", "--seed", str(seed))
        holdout = read(tmp_path / f"s{seed}.holdout.jsonl")
        assert len(card["held_out_tasks"]) == 1  # half of two tasks
        assert {line["metadata"]["task"] for line in holdout} == set(card["held_out_tasks"])
        assert sorted(ids(lines) + ids(holdout)) == sorted(["r1/turn_02", "r2/turn_03", "r7/turn_01", "r4/turn_02"])
        assert export(corpus, tmp_path / "again.jsonl", "--split-by-task", "0.5", "--seed", str(seed))[0] == lines
        splits.add(card["held_out_tasks"][0])
    assert splits == {GEMM, ATTN}


def test_data_card_counts(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixit.jsonl"
    lines, card = export(corpus, out)
    train = card["files"]["train"]
    assert train["examples"] == 4 and train["path"] == "fixit.jsonl"
    assert train["by_task"] == {GEMM: 3, ATTN: 1}
    assert train["by_arch"] == {"sm_100a": 1, "sm_90a": 3}
    assert train["by_error_class"] == {"compile_error": 1, "extract_error": 1, "timeout": 2}
    assert train["by_model"] == {"student-a": 2, "student-b": 1, "teacher-x": 1}
    assert train["by_failed_attempt_model"] == {"student-a": 2, "student-b": 2}
    assert train["mined"] == 1
    sizes = sorted(line["metadata"]["tokens"] for line in lines)
    assert train["tokens"] == {
        "min": sizes[0], "median": (sizes[1] + sizes[2]) / 2, "p90": sizes[3], "max": sizes[3], "total": sum(sizes)
    }  # fmt: skip
    # the card's paths are relative to its folder: nothing of the exporting machine's layout
    assert (
        card["command"]
        == f"python -m agent.export_sft {os.path.relpath(corpus, tmp_path)} --format fixit --out fixit.jsonl"
    )
    assert card["runs_read"] == 7 and card["runs_skipped"] == []
    assert card["filters"]["dedup"] is True and card["filters"]["max_tokens"] is None
    text = (tmp_path / "fixit.card.md").read_text()
    for row in ("| timeout | 2 |", "| teacher-x | 1 |", "| dedup | all | 1 | 4 |", f"| {GEMM} | 3 |"):
        assert row in text
    assert "completion_only_loss" in text and "`weight`" in text


@pytest.mark.parametrize(
    ("selection", "kept"),
    [
        (["--definition", "mha_with_lse_d128"], ["r4/turn_02"]),
        (["--workload", "m8192"], ["r5/turn_02", "r1/turn_02", "r2/turn_03", "r6/turn_01", "r6/turn_02", "r7/turn_01"]),
        (["--definition", "gemm_n7168_k5120,mha_with_lse_d128", "--workload", "s4096"], ["r4/turn_02"]),
        (["--workload", "all"], []),  # no run of a shape-general task here
    ],
)
def test_definition_and_workload_keep_only_those_runs_examples(corpus: Path, tmp_path: Path, selection, kept) -> None:
    lines, card = export(corpus, tmp_path / "gen.jsonl", *selection, fmt="kernelgen")
    assert ids(lines) == kept
    step = card["funnel"][1]
    assert (step["name"], step["removed"] + step["kept"]) == ("definition/workload", 8)
    chosen = dict(zip(selection[::2], selection[1::2], strict=True))
    assert card["filters"]["definitions"] == chosen.get("--definition", "").split(",") * ("--definition" in chosen)
    assert card["filters"]["workloads"] == chosen.get("--workload", "").split(",") * ("--workload" in chosen)


def test_kernelgen_one_example_per_distinct_solution(corpus: Path, tmp_path: Path) -> None:
    lines, card = export(corpus, tmp_path / "gen.jsonl", fmt="kernelgen")
    assert ids(lines) == [
        "r5/turn_02", "r1/turn_02", "r2/turn_03", "r6/turn_01", "r6/turn_02", "r7/turn_01", "r4/turn_02"
    ]  # fmt: skip
    first = next(line for line in lines if line["metadata"]["id"] == "r1/turn_02")
    assert first["messages"] == [
        {"role": "system", "content": "You write PTX for sm_90a."},
        {"role": "user", "content": f"Write {GEMM}."},
        {"role": "assistant", "content": "<think>\nthink one\n</think>\n\n" + answer("b1"), "weight": 1},
    ]
    assert first["metadata"]["wrong"] is None and first["metadata"]["error_class"] is None
    mined = next(line for line in lines if line["metadata"]["id"] == "r7/turn_01")
    assert [m["role"] for m in mined["messages"]] == ["system", "user", "assistant"]  # the seed is not shown
    assert [(s["name"], s["removed"], s["kept"]) for s in card["funnel"]] == [("candidates", 0, 8), ("dedup", 1, 7)]
    assert "by_error_class" not in card["files"]["train"]


def test_unreadable_run_is_skipped_and_named(corpus: Path, tmp_path: Path) -> None:
    broken = RunFolder.create(tmp_path / "more", "broken", {"task": GEMM, "arch": "sm_90a"})
    (broken.path / "trajectory.jsonl").write_text("not json\n{}\n")
    out = tmp_path / "fixit.jsonl"
    assert main([str(corpus), str(tmp_path / "more"), "--format", "fixit", "--out", str(out)]) == 0
    card = json.loads((tmp_path / "fixit.card.json").read_text())
    assert card["runs_read"] == 8 and len(read(out)) == 4
    skipped = card["runs_skipped"][0]  # named relative to the card's folder
    assert skipped.startswith("more/broken: more/broken/trajectory.jsonl, line 1: not a turn"), skipped


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "kernelgen", "--max-per-error-class", "2"], "max_per_error_class applies to fixit pairs only"),
        (["format=fixit", "holdout_tasks=gemm,nosuch"], "holdout_tasks: unknown task 'nosuch'"),
        (["--format", "fixit", "--split-by-task", "1.5"], "split_by_task: Input should be less than 1"),
        (["--format", "fixit", "--holdout-tasks", "gemm", "--split-by-task", "0.5"], "not both"),
        (["--format", "fixit", "--max-tokens", "0"], "max_tokens: Input should be greater than 0"),
        (["--format", "sft"], "format: Input should be 'fixit', 'kernelgen' or 'tools' (got 'sft')"),
        (["--format", "fixit", "--maxtokens", "5"], "unknown setting maxtokens; did you mean max_tokens?"),
    ],
)
def test_usage_errors(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    assert main([str(corpus), "--out", str(tmp_path / "x.jsonl"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x.jsonl").exists()


def test_output_and_folders_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for args, message in (
        ([str(tmp_path), "--out", str(tmp_path / "x.json")], "out: must name a .jsonl file"),
        ([str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.jsonl")], "no such folder"),
        ([str(tmp_path), "--out", str(tmp_path / "x.jsonl")], "no run folders under"),
    ):
        assert main([*args, "--format", "fixit"]) == 2
        assert message in capsys.readouterr().err


def test_command_line(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixit.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "agent.export_sft", str(corpus), "--format", "fixit", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"fixit: 5 candidates from 7 runs → 4 in {out}",
        "  2 runs gave none: 2 no failed attempt right before a passed one (unverified is not a failure)",  # r5, r6
        f"data card: {tmp_path / 'fixit.card.md'}",
    ]


def test_runs_that_give_nothing_say_what_they_lacked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    for name in ("u1", "u2", "u3"):  # evaluated without a GPU: clean, but never verified
        write_run(runs, name, GEMM, "sm_90a", "student-a", [Attempt(answer(name), "unverified")])
    write_run(runs, "m1", GEMM, "sm_90a", "student-a", [Attempt(answer("m"), "mismatch")])
    write_run(runs, "p1", GEMM, "sm_90a", "student-a", [Attempt(answer("p"), "passed_fast")])
    out = tmp_path / "fixit.jsonl"
    assert main([str(runs), "--format", "fixit", "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"fixit: 0 candidates from 5 runs → 0 in {out}",
        "  5 runs gave none: 3 no GPU verdict (attempts unverified: evaluated without a GPU of the arch); "
        "1 no passed attempt; 1 no failed attempt right before a passed one (unverified is not a failure)",
    ]
    assert main([str(runs), "--format", "kernelgen", "--out", str(out)]) == 0
    assert "  4 runs gave none: 3 no GPU verdict" in capsys.readouterr().out  # p1 gives one
