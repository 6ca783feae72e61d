"""Runs of a shape-general task beside runs of its workloads and of another definition, in the report, the inspector
and the run records: by=definition pools a definition's workloads, definition= and workload= keep only those runs,
workloads.csv holds every workload of every general attempt, the inspector shows and filters by definition and
workload, and a run records the catalog version (a run from before it did reads and scores as it did)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from agent.inspect import main as inspect_main
from agent.loop.config import SolveConfig
from agent.loop.records import RunConfig, RunFilter, Turn, task_labels
from agent.loop.run import prepare
from agent.loop.store import RunFolder
from agent.report import main as report_main
from tasks.catalog import CATALOG_VERSION, get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.test_general_pipeline import ScriptedGpu, passing
from tools.evaluation import Evaluation, Status
from tools.options import EvalOptions, Profile
from tools.pipeline import build, extract, gpu_stages

GENERAL = get_task("gemm_n7168_k5120_all")
ARCH = Arch.SM_90A
SPEEDUPS = [1.5, 1.2, 0.9, 1.3, 2.0]


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_run(runs: Path, run_id: str, task: str, evaluations: list[Evaluation], **config) -> None:
    record = {"task": task, "task_version": get_task(task).version, "arch": str(ARCH), "llm": {"name": "reference"},
              "max_turns": len(evaluations), **config}  # fmt: skip
    folder = RunFolder.create(runs, run_id, record)
    for index, ev in enumerate(evaluations, start=1):
        folder.append_turn(Turn(index=index, messages=[], evaluation=ev, started_at="2026-12-03T00:00:00+00:00"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """g1: the general task, wrong at four workloads then correct at all five; m70: its M=70 workload alone, unverified;
    attn: another definition, from before runs recorded the catalog version."""
    static = build(extract(GENERAL, ARCH, answer=reference_answer(GENERAL.name, ARCH)), GENERAL, ARCH, EvalOptions())
    options = EvalOptions(profile=Profile.COUNTS)
    wrong = passing([1.0] * 5)
    for member in GENERAL.workloads[:4]:
        wrong[member.name] = (Status.MISMATCH, None, False)
    evaluations = [gpu_stages(static, GENERAL, ARCH, options, ScriptedGpu(s)) for s in (wrong, passing(SPEEDUPS))]
    root = tmp_path_factory.mktemp("general") / "runs"
    write_run(root, "g1", GENERAL.name, evaluations, catalog_version=CATALOG_VERSION)
    m70 = evaluations[1].workloads[0]
    plain = Evaluation(task="gemm_n7168_k5120_m70", arch=ARCH, status=Status.UNVERIFIED, message=m70.message)
    write_run(root, "m70", "gemm_n7168_k5120_m70", [plain], catalog_version=CATALOG_VERSION, max_turns=2)
    write_run(root, "attn", "mha_with_lse_d128", [Evaluation(task="mha_with_lse_d128", arch=ARCH,
                                                             status=Status.UNVERIFIED)])  # fmt: skip
    return root


def test_a_runs_definition_and_workload_come_from_its_task():
    assert task_labels("gemm_n7168_k5120_all") == ("gemm_n7168_k5120", "all")
    assert task_labels("gemm") == ("gemm_n7168_k5120", "m8192")  # an alias: the core GEMM at M 8192
    assert task_labels("mha_bwd_d96_s512") == ("mha_bwd_d96", "s512")
    assert task_labels("attn_fwd_wave0") == ("attn_fwd_wave0", "-")  # no longer a task: its own definition
    config = RunConfig(task="gemm_n7168_k5120_m70", arch="sm_90a")
    assert (config.definition, config.workload, config.catalog_version) == ("gemm_n7168_k5120", "m70", None)
    chosen = RunFilter(definition=" GEMM_N7168_K5120 ", workload="all,m70")
    assert chosen.matches(config) and chosen.matches_task("gemm_n7168_k5120_all")
    assert not chosen.matches_task("gemm_n7168_k5120") and not chosen.matches_task("mha_with_lse_d128")
    assert chosen.describe() == "definition=gemm_n7168_k5120 workload=all,m70" and not RunFilter()


def test_the_report_pools_a_definition_and_lists_each_workload(runs: Path, tmp_path: Path):
    out = tmp_path / "report"
    assert report_main([str(runs), f"out={out}", "by=definition"]) == 0
    trajectories = {r["run_id"]: r for r in rows(out / "trajectories.csv")}
    assert {k: (r["definition"], r["workload"], r["catalog_version"]) for k, r in trajectories.items()} == {
        "g1": ("gemm_n7168_k5120", "all", str(CATALOG_VERSION)),
        "m70": ("gemm_n7168_k5120", "m70", str(CATALOG_VERSION)),
        "attn": ("mha_with_lse_d128", "s4096", ""),
    }
    assert trajectories["g1"]["best_speedup"] == "0.9" and trajectories["g1"]["first_correct"] == "2"
    definitions = {r["task"]: r for r in rows(out / "definitions.csv")}
    gemm = definitions["gemm_n7168_k5120"]
    assert (gemm["trajectories"], gemm["correct"], gemm["unverified"]) == ("2", "0.5", "0.5")
    assert definitions["mha_with_lse_d128"]["trajectories"] == "1"
    workloads = rows(out / "workloads.csv")
    assert [(r["turn"], r["workload"], r["status"]) for r in workloads] == [
        ("1", "m70", "mismatch"), ("1", "m232", "mismatch"), ("1", "m972", "mismatch"), ("1", "m2379", "mismatch"),
        ("1", "m8192", "passed"), *[("2", w, "passed") for w in ("m70", "m232", "m972", "m2379", "m8192")],
    ]  # fmt: skip
    second = [r for r in workloads if r["turn"] == "2"]
    assert [float(r["speedup"]) for r in second] == SPEEDUPS
    assert {r["attempt_speedup_min"] for r in second} == {"0.9"}
    assert float(second[0]["attempt_speedup_geomean"]) == pytest.approx((1.5 * 1.2 * 0.9 * 1.3 * 2.0) ** 0.2)
    report = (out / "report.md").read_text()
    assert "## Per definition (its workloads pooled" in report and "## Shape-general tasks, per workload" in report
    assert re.search(r"\| gemm_n7168_k5120 +\| sm_90a +\| multi +\| 2 +\| 2 +\| 50% .*\| all, m70 +\|", report)


@pytest.mark.parametrize(
    ("selection", "kept"),
    [
        (["definition=gemm_n7168_k5120"], {"g1", "m70"}),
        (["workload=all"], {"g1"}),
        (["workload=m70,s4096"], {"m70", "attn"}),
        (["definition=gemm_n7168_k5120", "workload=s4096"], None),
    ],
)
def test_the_report_keeps_only_the_runs_asked_for(runs: Path, tmp_path: Path, selection, kept, capsys):
    out = tmp_path / "report"
    code = report_main([str(runs), f"out={out}", *selection])
    if kept is None:
        assert code == 2 and "no run under" in capsys.readouterr().err
        return
    assert code == 0
    assert {r["run_id"] for r in rows(out / "trajectories.csv")} == kept
    assert f"**selected**: only the runs with {' '.join(selection)}" in (out / "report.md").read_text()


def test_the_inspector_shows_and_filters_by_definition_and_workload(runs: Path, tmp_path: Path):
    site = tmp_path / "site"
    assert inspect_main([str(runs), f"out={site}"]) == 0
    index = (site / "index.html").read_text()
    assert {"definition", "workload"} <= set(re.findall(r'data-filter="(\w+)"', index))  # 2 tasks of one definition
    assert 'data-f-definition="gemm_n7168_k5120"' in index and 'data-f-workload="all"' in index
    page = (site / "runs" / "runs" / "g1.html").read_text()
    assert "(definition gemm_n7168_k5120, workload all)" in page
    assert page.count('<table class="workloads">') == 2 and "the stages below are gemm_n7168_k5120_m972" in page
    only = tmp_path / "only"
    assert inspect_main([str(runs), f"out={only}", "workload=all"]) == 0
    assert [p.stem for p in (only / "runs").rglob("*.html")] == ["g1"]


def test_a_run_records_the_catalog_version(tmp_path: Path):
    prepared = prepare(SolveConfig(task="gemm_n7168_k5120_all", arch="sm_90a", llm={"name": "reference"},
                                   runs_dir=tmp_path), quiet=True)  # fmt: skip
    try:
        config = json.loads((prepared.folder.path / "config.json").read_text())
    finally:
        prepared.hold.close()
    assert config["catalog_version"] == CATALOG_VERSION and config["task"] == "gemm_n7168_k5120_all"
    assert RunConfig.model_validate(config).workload == "all"
