"""`python -m agent.mine_repairs`: a scripted teacher (tests/fixtures/sft/teacher.json) repairs a scripted
student's failed attempts through the real loop (real ptxas; recorded GPU evaluations for answers tagged
`// eval: NAME`), and agent.export_sft turns the teacher's runs into fix-it pairs. Also the `seed` setting
of agent.solve that mining rests on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import agent.loop.store
from agent.export_sft import main as export_main
from agent.loop.store import RunFolder
from agent.mine_repairs import main
from agent.sft.mine import mine
from agent.solve import main as solve_main
from tests.agent.helpers import RecordedGpu, answer_replaying, fixture_text, solve, write_script
from tests.dask_cluster import Cluster
from tools.evaluation import Status

SFT = Path(__file__).resolve().parents[2] / "fixtures" / "sft"
TEACHER = [f"llm.path={SFT / 'teacher.json'}", "llm=scripted"]


def student(tmp_path: Path, answers: list, *extra: str, gpu: RecordedGpu | None = None) -> RunFolder:
    """A student run of gemm on sm_90a under tmp_path/students."""
    script = write_script(tmp_path / "student.json", answers)
    args = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", f"runs_dir={tmp_path / 'students'}"]
    code, folder = solve([*args, *extra], gpu=gpu)
    assert code == 0
    return folder


def export(tmp_path: Path, *dirs: Path) -> list[dict]:
    out = tmp_path / "fixit.jsonl"
    assert export_main([*map(str, dirs), "--format", "fixit", "--out", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture
def mined(tmp_path: Path, capsys: pytest.CaptureFixture) -> tuple[RunFolder, Path, str]:
    """Student: a typo (ptxas refuses it), a wrong result, then a correct but slow kernel. The teacher
    mines the first two, fixing each at its first turn."""
    answers = [fixture_text("fill_typo.md"), answer_replaying("mismatch"), answer_replaying("passed_slow")]
    folder = student(tmp_path, answers, "max_turns=3", gpu=RecordedGpu())
    assert folder.summary().statuses == ["compile_error", "mismatch", "passed"]
    capsys.readouterr()
    code = mine([str(tmp_path / "students"), *TEACHER, f"runs_dir={tmp_path / 'teachers'}", "max_turns=2"],
                gpu=RecordedGpu)  # fmt: skip
    assert code == 0
    return folder, tmp_path / "teachers", capsys.readouterr().out


def test_each_failed_attempt_gets_a_seeded_teacher_run(mined: tuple[RunFolder, Path, str]) -> None:
    folder, teachers, out = mined
    names = sorted(p.name for p in teachers.iterdir())
    assert names == [f"mined-{folder.run_id}-turn01", f"mined-{folder.run_id}-turn02"]
    recorded = folder.turns()
    for n, name in enumerate(names, start=1):
        teacher = RunFolder(teachers / name)
        config, (turn,) = teacher.config(), teacher.turns()
        assert config.seed == {"run": str(folder.path.resolve()), "turn": n}
        assert config.seed_attempt == {
            "run_id": folder.run_id,
            "turn": n,
            "status": recorded[n - 1].evaluation.status.value,
            "cut": False,
            "policy": folder.config().policy,
            "llm": folder.config().llm.model_dump(exclude_unset=True),
        }
        # The teacher saw the student's prompts word for word, then the failed attempt and its feedback.
        assert [(m.role, m.content) for m in turn.messages] == [
            ("system", recorded[n - 1].messages[0].content),
            ("user", recorded[n - 1].messages[1].content),
            ("assistant", recorded[n - 1].response),
            ("user", recorded[n - 1].feedback),
        ]
        assert turn.evaluation.status is Status.PASSED and teacher.summary().stop_reason == "solved"
    rows = out.splitlines()
    header = ["student run", "turn", "status", "student", "teacher run", "outcome", "repaired", "stop"]
    assert re.split(r"\s{2,}", rows[0]) == header
    assert rows[1].split()[1:3] == ["1", "compile_error"] and rows[2].split()[1:3] == ["2", "mismatch"]
    assert "2 failed attempts; the teacher repaired 2" in out
    assert f"python -m agent.export_sft {teachers} --format fixit" in out


def test_mined_runs_export_as_pairs_of_student_failure_and_teacher_fix(
    mined: tuple[RunFolder, Path, str], tmp_path: Path
) -> None:
    folder, teachers, _ = mined
    lines = export(tmp_path, tmp_path / "students", teachers)
    by_id = {line["metadata"]["id"]: line for line in lines}
    assert set(by_id) == {
        f"{folder.run_id}/turn_03",  # the student's own repair of its mismatch
        f"mined-{folder.run_id}-turn01/turn_01",
        f"mined-{folder.run_id}-turn02/turn_01",
    }
    typo = by_id[f"mined-{folder.run_id}-turn01/turn_01"]
    assert typo["messages"][2] == {"role": "assistant", "content": fixture_text("fill_typo.md"), "weight": 0}
    assert "line 16: error: Not a name of any known instruction: 'mda'" in typo["messages"][3]["content"]  # ptxas
    reasoning = json.loads((SFT / "teacher.json").read_text())[0]["reasoning"]
    assert typo["messages"][4] == {
        "role": "assistant",
        "content": f"<think>\n{reasoning}\n</think>\n\n{(SFT / 'teacher_fix.md').read_text()}",
        "weight": 1,
    }
    meta = typo["metadata"]
    assert (meta["error_class"], meta["mined"], meta["wrong"]["run_id"], meta["wrong"]["turn"]) == (
        "compile_error", True, folder.run_id, 1
    )  # fmt: skip
    assert by_id[f"mined-{folder.run_id}-turn02/turn_01"]["metadata"]["error_class"] == "mismatch"
    assert by_id[f"{folder.run_id}/turn_03"]["metadata"]["mined"] is False


def test_mining_again_skips_finished_runs_and_refuses_another_teacher(
    mined: tuple[RunFolder, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _, teachers, _ = mined
    before = {p: (p / "trajectory.jsonl").read_text() for p in teachers.iterdir()}
    assert mine([str(tmp_path / "students"), *TEACHER, f"runs_dir={teachers}"], gpu=RecordedGpu) == 0
    assert {p: (p / "trajectory.jsonl").read_text() for p in teachers.iterdir()} == before
    assert capsys.readouterr().out.count("solved (earlier)") == 2
    other = write_script(tmp_path / "other.json", [answer_replaying("passed_fast")])
    args = [str(tmp_path / "students"), "llm=scripted", f"llm.path={other}", f"runs_dir={teachers}"]
    assert main(args) == 2
    assert "was mined by another teacher (scripted (" in capsys.readouterr().err


def test_unverified_attempts_are_not_mined_and_an_unverified_fix_is_no_pair(tmp_path: Path) -> None:
    """Without a GPU (eval.gpu=false) the student's fixed kernel is unverified: not a failure, so not
    mined; the teacher's answer, compiled for real, is unverified too, which repairs nothing."""
    folder = student(tmp_path, [fixture_text("fill_typo.md"), fixture_text("fill_ok.md")], "eval.gpu=false")
    assert folder.summary().statuses == ["compile_error", "unverified"]
    teacher = write_script(tmp_path / "teacher.json", [fixture_text("fill_ok.md")])
    teachers = tmp_path / "teachers"
    args = [str(tmp_path / "students"), "llm=scripted", f"llm.path={teacher}", f"runs_dir={teachers}"]
    assert mine([*args, "eval.gpu=false"]) == 0
    (name,) = (p.name for p in teachers.iterdir())
    assert name == f"mined-{folder.run_id}-turn01"
    assert RunFolder(teachers / name).summary().statuses == ["unverified"]
    assert export(tmp_path, tmp_path / "students", teachers) == []


def test_a_teacher_run_cut_short_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The teacher's first answer fails too and the disk goes away right after it is recorded: mining
    exits 1; mining again resumes that run, which repairs at turn 2 (its own failure, so not mined)."""
    folder = student(tmp_path, [fixture_text("fill_typo.md")], "max_turns=1", "eval.gpu=false")
    teacher = write_script(tmp_path / "teacher.json", [fixture_text("fill_typo.md"), answer_replaying("passed_fast")])
    args = [str(tmp_path / "students"), "llm=scripted", f"llm.path={teacher}", f"runs_dir={tmp_path / 'teachers'}"]
    real, calls = agent.loop.store.RunFolder.write_summary, []

    def crash_first(self: RunFolder, summary: dict) -> None:
        calls.append(1)
        if len(calls) == 1:  # turn 1's feedback step, right after it appended the turn
            raise OSError("disk went away")
        real(self, summary)

    monkeypatch.setattr(agent.loop.store.RunFolder, "write_summary", crash_first)
    assert mine(args, gpu=RecordedGpu) == 1
    monkeypatch.setattr(agent.loop.store.RunFolder, "write_summary", real)
    assert mine(args, gpu=RecordedGpu) == 0
    run = RunFolder(tmp_path / "teachers" / f"mined-{folder.run_id}-turn01")
    turns = run.turns()
    assert [t.evaluation.status for t in turns] == [Status.COMPILE_ERROR, Status.PASSED]
    assert turns[1].messages[2].content == fixture_text("fill_typo.md")  # the seed still opens the conversation
    assert len(turns[1].messages) == 6 and run.summary().stop_reason == "solved"
    (pair,) = export(tmp_path, tmp_path / "teachers")
    assert pair["metadata"]["mined"] is False and pair["metadata"]["wrong"]["run_id"] == run.run_id


def test_seed_setting_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = student(tmp_path, ["no code"], "max_turns=1", "eval.gpu=false")
    base = ["task=gemm", "arch=sm_90a", "llm=reference", f"runs_dir={tmp_path / 'seeded'}"]
    for args, message in (
        (["seed=1"], "seed takes sub-keys, e.g. seed.run=RUN seed.turn=2"),
        ([f"seed.run={folder.path}", "seed.turns=1"], "unknown setting seed.turns; did you mean seed.turn?"),
        ([f"seed.run={folder.path}", "seed.turn=0"], "seed.turn: Input should be greater than or equal to 1"),
        ([f"seed.run={tmp_path / 'nowhere'}", "seed.turn=1"], "is not a run folder"),
        ([f"seed.run={folder.path}", "seed.turn=2"], "has no turn 2 (1 turns recorded)"),
    ):
        assert solve_main([*base, *args]) == 2
        assert message in capsys.readouterr().err
    assert solve_main([*base[:1], "arch=sm_100a", *base[2:], f"seed.run={folder.path}", "seed.turn=1"]) == 2
    assert "solved gemm_n7168_k5120 on sm_90a, not gemm_n7168_k5120 on sm_100a" in capsys.readouterr().err
    assert not (tmp_path / "seeded").exists()  # refused before any run folder was made


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["llm=scripted", "task=gemm"], "task cannot be given: each teacher run gets its own"),
        (["llm=scripted", "seed.turn=1"], "seed.turn cannot be given"),
        (["llm=scripted"], "name the student runs"),
    ],
)
def test_mining_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_missing_folder_and_help(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path / "nowhere"), "llm=scripted"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["help"]) == 0 and "seed_attempt" in capsys.readouterr().out


def test_teacher_runs_send_their_gpu_stages_to_the_dask_pool(
    tmp_path: Path, dask_gpus: Cluster, capsys: pytest.CaptureFixture
) -> None:
    student(tmp_path, [fixture_text("fill_typo.md")], "max_turns=1", "eval.gpu=false")
    args = [str(tmp_path / "students"), *TEACHER, f"runs_dir={tmp_path / 'teachers'}", "max_turns=1",
            f"eval.pool={dask_gpus.address}"]  # fmt: skip
    assert main(args) == 0
    (teacher,) = (tmp_path / "teachers").iterdir()
    (turn,) = RunFolder(teacher).turns()
    assert (turn.evaluation.status, turn.evaluation.worker) == (Status.UNVERIFIED, "cpu-hopper")
