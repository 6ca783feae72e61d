"""Metrics on the fixture bench (tests/fixtures/runs/make_runs.py), read back through agent.loop.store, against
values computed by hand. Turn codes: "P1.5T" passed with speedup 1.5 and targets met, "P0.9F" passed
without its targets, CE/ABI/RE/LE/TO/MM/UV/FMT the failing statuses.

gemm (G), sm_90a:  single s00 P1.2T · s01 CE · s02 P0.6F · s03 MM
                   multi  m00 CE RE P0.5T P1.5T (solved) · m01 ABI TO MM MM P0.9F LE P0.8T MM
mha_with_lse_d128 (A): single CE · MM · UV · FMT (none correct)
                   multi  m00 UV UV · m01 CE P2.0F MM (killed: unfinished)
"""

from __future__ import annotations

import filecmp
import math
from dataclasses import replace
from pathlib import Path

import pytest

from agent.bench import score
from agent.bench.score import ALL, NOT_REACHED, Group
from agent.loop.records import Trajectory
from agent.loop.store import RunFolder, find_runs
from tests.fixtures.runs import make_runs

RUNS = Path(make_runs.__file__).parent
G, A = make_runs.GEMM, make_runs.ATTN
MODEL = "fixture-model"


@pytest.fixture(scope="module")
def trajs() -> list[Trajectory]:
    return [f.trajectory() for f in find_runs([RUNS / "bench"])]


def one(trajs: list[Trajectory], task: str, mode: str, sample: int) -> Trajectory:
    return next(t for t in trajs if t.run_id == f"{task}-sm_90a-{mode}-s{sample:02d}")


def suite(trajs: list[Trajectory], task: str, mode: str, limit: int, arch: str = "sm_90a") -> score.SuiteScore:
    found = [
        s for s in score.suite_scores(trajs) if s.group == Group(MODEL, task, arch, mode) and s.turn_limit == limit
    ]
    assert len(found) == 1
    return found[0]


def test_checked_in_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    make_runs.write_fixtures(tmp_path)
    for name in ("bench", "replay"):
        fresh = sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file())
        kept = sorted(p.relative_to(RUNS / name) for p in (RUNS / name).rglob("*") if p.is_file())
        assert fresh == kept
        _, mismatch, errors = filecmp.cmpfiles(tmp_path / name, RUNS / name, [str(p) for p in kept], shallow=False)
        assert not mismatch and not errors, "regenerate: python -m tests.fixtures.runs.make_runs"


def test_wave_1_run_folders_load_and_score_as_todays_do() -> None:
    """tests/fixtures/runs/wave1/ holds two of these folders as wave 1 wrote them (summary keys in another
    order, no policy, no eval.seed): they load into the typed records and score as the regenerated ones."""
    for old, new in (
        ("wave1/gemm-replay", "replay/gemm-replay"),
        (f"wave1/{G}-sm_90a-multi-s00", f"bench/{G}-sm_90a-multi-s00"),
    ):
        was, now = RunFolder(RUNS / old).trajectory(), RunFolder(RUNS / new).trajectory()
        assert {t.format_version for t in was.turns} == {1} and {t.format_version for t in now.turns} == {2}
        unversioned = [[t.model_dump(exclude={"format_version"}) for t in x.turns] for x in (was, now)]
        assert unversioned[0] == unversioned[1] and was.summary.policy is None  # wave 1 did not record it
        assert was.summary.model_dump(exclude={"policy"}) == now.summary.model_dump(exclude={"policy"})
        assert (was.config.task, was.config.llm.model_name, was.config.max_turns) == (now.config.task, MODEL, 8)
        assert score.trajectory_row(was) == score.trajectory_row(now)
        assert [s.row() for s in score.suite_scores([was])] == [s.row() for s in score.suite_scores([now])]


def test_fixture_runs_read_back_as_written(trajs: list[Trajectory]) -> None:
    assert len(trajs) == 12
    m01 = one(trajs, A, "multi", 1)
    assert [t.evaluation.status.value for t in m01.turns] == ["compile_error", "passed", "mismatch"]
    assert not score.finished(m01) and score.finished(one(trajs, A, "multi", 0))
    assert {score.mode(t) for t in trajs} == {"single", "multi"} and {score.model(t) for t in trajs} == {MODEL}
    assert RunFolder(RUNS / "bench" / m01.run_id).summary().stop_reason is None


def test_one_trajectory_at_turn_limits(trajs: list[Trajectory]) -> None:
    m00, m01 = one(trajs, G, "multi", 0), one(trajs, G, "multi", 1)
    # m00: CE RE P0.5T P1.5T — correct from turn 3, best 1.5 from turn 4
    assert [score.correct_at(m00, t) for t in (1, 2, 3, 4, 8)] == [False, False, True, True, True]
    assert score.best_speedup_at(m00, 3) == 0.5 and score.best_speedup_at(m00, 8) == 1.5
    assert score.fast_at(m00, 3, 0.5) is False  # 0.5 is not > 0.5
    assert score.fast_at(m00, 4, 1.0) is True
    # m01: correct at turn 5 (P0.9F) but its targets only run at turn 7 (P0.8T)
    assert score.correct_at(m01, 5) and not score.targets_at(m01, 5) and score.targets_at(m01, 7)
    assert score.best_speedup_at(m01, 8) == 0.9
    assert score.first_turn(m01) == 5 and score.first_turn(m01, with_targets=True) == 7
    assert score.best_speedup_at(m01, 4) is None
    # unverified never counts as correct, and is counted apart
    assert not score.correct_at(one(trajs, A, "single", 2), 1)
    assert score.unverified_at(one(trajs, A, "single", 2), 1) and not score.unverified_at(one(trajs, A, "single", 1), 1)


def test_unverified_share(trajs: list[Trajectory]) -> None:
    # A single: CE · MM · UV · FMT → 1/4; A multi: m00 UV UV (not correct), m01 CE P2.0F MM (correct at 2)
    assert suite(trajs, A, "single", 1).unverified == 0.25
    assert suite(trajs, A, "multi", 1).unverified == 0.5
    assert suite(trajs, A, "multi", 4).unverified == 0.5
    # gemm has no unverified attempt; pooled over both tasks at 4 turns: A's m00 alone, 1 of 4
    assert suite(trajs, G, "multi", 8).unverified == 0.0
    assert suite(trajs, ALL, "multi", 4).unverified == 0.25


def test_turn_limits() -> None:
    assert score.turn_limits(1) == (1,)
    assert score.turn_limits(8) == (1, 4, 8)
    assert score.turn_limits(5) == (1, 4, 5)
    assert score.turn_limits(12) == (1, 4, 8, 12)


def test_gemm_repair_runs_at_1_4_8(trajs: list[Trajectory]) -> None:
    s1, s4, s8 = (suite(trajs, G, "multi", t) for t in (1, 4, 8))
    # t=1: CE, ABI — nothing correct, no speedups
    assert (s1.correct, s1.correct_targets, s1.attempts, s1.geomean_speedup) == (0.0, 0.0, 2, None)
    assert s1.fast_traj == (0.0,) * 4 and s1.fast_turn == (0.0,) * 4
    # t=4: m00 correct (P0.5T, P1.5T) with targets, best 1.5; m01 not → 1/2 everywhere per trajectory.
    assert (s4.correct, s4.correct_targets) == (0.5, 0.5)
    assert s4.fast_traj == (0.5, 0.5, 0.5, 0.5)
    # per attempt: 8 turns ≤ 4; speedups 0.5, 1.5 → >0: 2/8, >0.5: 1/8, >0.8: 1/8, >1: 1/8
    assert s4.attempts == 8 and s4.fast_turn == (0.25, 0.125, 0.125, 0.125)
    assert s4.geomean_speedup == pytest.approx(math.sqrt(0.5 * 1.5))  # 0.8660
    assert s4.geomean_best == pytest.approx(1.5)
    # t=8: m01 correct too (P0.9F at 5, P0.8T at 7: targets), best 0.9 → fast_1 only m00
    assert (s8.correct, s8.correct_targets) == (1.0, 1.0)
    assert s8.fast_traj == (1.0, 1.0, 1.0, 0.5)
    # 12 turns (4 + 8); speedups 0.5 1.5 0.9 0.8 → >0: 4, >0.5: 3, >0.8: 2, >1: 1
    assert s8.attempts == 12
    assert s8.fast_turn == pytest.approx((4 / 12, 3 / 12, 2 / 12, 1 / 12))
    assert s8.geomean_speedup == pytest.approx((0.5 * 1.5 * 0.9 * 0.8) ** 0.25)  # 0.54^¼ = 0.8572
    assert s8.geomean_best == pytest.approx(math.sqrt(1.5 * 0.9))  # 1.1619
    assert s8.best_speedup == 1.5 and s8.unfinished == 0


def test_single_shot_scores(trajs: list[Trajectory]) -> None:
    g = suite(trajs, G, "single", 1)
    # P1.2T CE P0.6F MM: correct 2/4, with targets 1/4; fast_p: >0 and >0.5 both, >0.8 and >1 only 1.2
    assert (g.correct, g.correct_targets, g.trajectories) == (0.5, 0.25, 4)
    assert g.fast_traj == (0.5, 0.5, 0.25, 0.25) and g.fast_turn == (0.5, 0.5, 0.25, 0.25)
    assert g.geomean_speedup == pytest.approx(math.sqrt(1.2 * 0.6))  # 0.8485
    assert [s.turn_limit for s in score.suite_scores(trajs) if s.group == Group(MODEL, G, "sm_90a", "single")] == [1]
    a = suite(trajs, A, "single", 1)
    assert (a.correct, a.geomean_speedup, a.best_speedup) == (0.0, None, None)


def test_pooled_groups_and_unfinished(trajs: list[Trajectory]) -> None:
    pooled = suite(trajs, ALL, "multi", 4)
    # G: m00 correct at 4; A: m01 correct at 2 (P2.0F, no targets) → correct 2/4, +targets 1/4
    assert (pooled.trajectories, pooled.correct, pooled.correct_targets, pooled.unfinished) == (4, 0.5, 0.25, 1)
    # attempts ≤ 4: G 8, A 2 + 3 = 13; speedups 0.5 1.5 2.0 → geomean 1.5^(1/3)
    assert pooled.attempts == 13 and pooled.geomean_speedup == pytest.approx(1.5 ** (1 / 3))
    # one arch: pooling over archs changes nothing but the label
    assert suite(trajs, ALL, "multi", 4, arch=ALL) == replace(pooled, group=Group(MODEL, ALL, ALL, "multi"))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 2, 1, 0.5),  # 1 − C(2,1)/C(4,1) = 1 − 2/4
        (4, 2, 2, 5 / 6),  # 1 − C(2,2)/C(4,2) = 1 − 1/6
        (4, 2, 3, 1.0),  # n − c = 2 < 3: any 3 of 4 hold a correct one
        (4, 2, 4, 1.0),  # n = k
        (4, 1, 4, 1.0),  # n = k, one correct: it is always drawn
        (4, 0, 4, 0.0),  # n = k, none correct
        (4, 0, 1, 0.0),  # zero correct
        (4, 4, 1, 1.0),  # all correct
        (4, 1, 3, 0.75),  # 1 − C(3,3)/C(4,3) = 1 − 1/4
        (10, 3, 5, 1 - 21 / 252),  # C(7,5) = 21, C(10,5) = 252
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k(n: int, c: int, k: int, expected: float) -> None:
    assert score.pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 2, 5), (4, 2, 0), (4, 5, 1), (0, 0, 1)])
def test_pass_at_k_refuses_undefined_cases(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        score.pass_at_k(n, c, k)


def test_geomean() -> None:
    assert score.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert score.geomean([]) is None


def budget(trajs: list[Trajectory], task: str, arch: str = "sm_90a") -> dict[int, score.BudgetPoint]:
    return {p.k: p for p in score.single_vs_multi(trajs) if p.group == Group(MODEL, task, arch, ALL)}


def test_single_shot_vs_repair_per_problem(trajs: list[Trajectory]) -> None:
    g = budget(trajs, G)
    assert sorted(g) == list(range(1, 9))  # k up to max(4 samples, 8 turns)
    # single: n=4, c=2 → 1/2, 5/6, 1, 1; fast_1: c=1 (P1.2T) → 1/4, 1 − C(3,2)/C(4,2) = 1/2, 3/4, 1
    assert [g[k].pass_at_k for k in (1, 2, 3, 4)] == pytest.approx([0.5, 5 / 6, 1.0, 1.0])
    assert [g[k].fast1_pass_at_k for k in (1, 2, 3, 4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert g[5].pass_at_k is None  # 5 > 4 samples
    # repair: m00 correct at 3, fast_1 at 4 (P1.5T); m01 correct at 5, never fast_1
    assert [g[k].repair_at_k for k in range(1, 9)] == [0, 0, 0.5, 0.5, 1, 1, 1, 1]
    assert [g[k].fast1_repair_at_k for k in range(1, 9)] == [0, 0, 0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert (g[1].single_n, g[1].single_correct, g[1].multi_n) == (4, 2, 2)
    a = budget(trajs, A)
    # zero correct samples: pass@k = 0 for every k ≤ n; repair: m01 passes at turn 2 with speedup 2.0
    assert [a[k].pass_at_k for k in (1, 2, 3, 4)] == [0.0] * 4
    assert [a[k].repair_at_k for k in (1, 2, 3)] == [0, 0.5, 0.5]
    assert [a[k].fast1_repair_at_k for k in (1, 2, 3)] == [0, 0.5, 0.5]


def test_single_shot_vs_repair_pooled_over_problems(trajs: list[Trajectory]) -> None:
    pooled = budget(trajs, ALL)
    # means of the two problems: pass@1 (0.5 + 0)/2, pass@2 (5/6 + 0)/2; repair@2 (0 + 0.5)/2, @3 (0.5 + 0.5)/2
    assert pooled[1].pass_at_k == pytest.approx(0.25) and pooled[2].pass_at_k == pytest.approx(5 / 12)
    assert [pooled[k].repair_at_k for k in (1, 2, 3, 5)] == [0, 0.25, 0.5, 0.75]
    assert pooled[6].pass_at_k is None and pooled[6].repair_at_k == 0.75
    assert (pooled[1].single_n, pooled[1].single_correct, pooled[1].multi_n) == (8, 2, 4)


def test_budgets_need_both_modes(trajs: list[Trajectory]) -> None:
    assert score.single_vs_multi([t for t in trajs if score.mode(t) == "multi"]) == []


def test_status_per_turn(trajs: list[Trajectory]) -> None:
    rows = {s.turn: s.counts for s in score.status_per_turn(trajs) if s.group == Group(MODEL, ALL, ALL, "multi")}
    assert sorted(rows) == list(range(1, 9))
    # turn 1: G CE, ABI; A UV, CE
    assert rows[1] == {"compile": 2, "abi": 1, "unverified": 1}
    # turn 2: G RE, TO; A UV, P2.0F
    assert rows[2] == {"runtime": 1, "timeout": 1, "unverified": 1, "passed": 1}
    # turn 3: G P0.5T, MM; A m00 stopped after 2, m01 MM
    assert rows[3] == {"passed": 1, "mismatch": 2, NOT_REACHED: 1}
    # turn 6: only G m01 (LE, a launch error: the runtime class)
    assert rows[6] == {"runtime": 1, NOT_REACHED: 3}
    single = [s for s in score.status_per_turn(trajs) if s.group == Group(MODEL, A, "sm_90a", "single")]
    assert [s.counts for s in single] == [{"compile": 1, "mismatch": 1, "unverified": 1, "format": 1}]


def test_trajectory_row(trajs: list[Trajectory]) -> None:
    row = score.trajectory_row(one(trajs, G, "multi", 1))
    assert row["statuses"] == "abi_error;timeout;mismatch;mismatch;passed;launch_error;passed;mismatch"
    assert [row[k] for k in ("first_correct", "first_correct_targets", "best_speedup", "best_speedup_turn")] == [
        5,
        7,
        0.9,
        5,
    ]
    assert (row["mode"], row["max_turns"], row["turns"], row["stop_reason"]) == ("multi", 8, 8, "max_turns")


def test_tools_runs_score_by_their_result_at_equal_evaluations() -> None:
    """tools@k: a tools run counts at budget k when its result is correct and it spent at most k GPU evaluations;
    it sits beside pass@k and repair@k, and a problem needs runs of two modes for a budget row."""
    from agent.loop.records import RunConfig, ToolsOutcome

    def traj(run_id: str, mode: str, codes: list[str], evaluations: int | None = None) -> Trajectory:
        turns = [make_runs.turn(i, make_runs.evaluation(G, c), c) for i, c in enumerate(codes, start=1)]
        if evaluations is not None:
            outcome = ToolsOutcome(submitted=True, step=3, tool_calls=5, evaluations=evaluations)
            turns = [turns[-1].model_copy(update={"tools": outcome})]
        config = RunConfig(task=G, arch="sm_90a", max_turns=1 if mode == "single" else 4,
                           mode="tools" if evaluations is not None else "turns",
                           llm={"name": "openai", "model": MODEL})  # fmt: skip
        return Trajectory(run_id=run_id, config=config, turns=turns)

    trajs = [
        traj("s0", "single", ["P1.2T"]), traj("s1", "single", ["CE"]),
        traj("t0", "tools", ["P1.2T"], evaluations=3), traj("t1", "tools", ["MM"], evaluations=1),
    ]  # fmt: skip
    assert [score.mode(t) for t in trajs] == ["single", "single", "tools", "tools"]
    assert score.tools_row(trajs[2]) == {"submitted": True, "tool_calls": 5, "refused_calls": 0, "budget": None}
    points = {p.k: p for p in score.single_vs_multi(trajs) if p.group.task == G}
    assert sorted(points) == [1, 2, 3, 4]
    assert [points[k].tools_at_k for k in (1, 2, 3, 4)] == [0.0, 0.0, 0.5, 0.5]  # t0 correct once k ≥ 3
    assert points[1].pass_at_k == 0.5 and points[3].pass_at_k is None and points[1].repair_at_k is None
    assert points[1].tools_n == 2 and score.trajectory_row(trajs[2])["evaluations"] == 3
