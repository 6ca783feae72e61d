"""The shape-general tasks (`<definition>_all`): one per definition with several workloads, holding its member tasks in
the catalog's order and reading as its largest; their names resolve (and near misses name them), the group `general`
lists them, and the definition's reference answer serves them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tasks.catalog import GENERAL, GROUPS, TASKS, get_task, resolve_names
from tasks.schema import Arch, UnknownName
from tasks.solutions import answer_key, answer_path, reference_answer
from tests.tasks.test_catalog import ROOT

DEFINITIONS: dict[str, list[str]] = {}
for _name, _task in TASKS.items():
    DEFINITIONS.setdefault(_task.definition, []).append(_name)


def test_one_general_task_per_definition_with_several_workloads():
    several = [d for d, members in DEFINITIONS.items() if len(members) > 1]
    assert list(GENERAL) == [f"{d}_all" for d in several] == GROUPS["general"]
    # 17 GEMM definitions, the forward's D 64/128/256 and the backward's D 64/96/128, each with and without the mask
    assert len(GENERAL) == 17 + 6 + 6
    assert not set(GENERAL) & set(TASKS) and not set(GROUPS["general"]) & set(GROUPS["all"])
    assert not any(get_task(name).general for name in GROUPS["fp8"] + GROUPS["gqa"])  # one workload each


@pytest.mark.parametrize("name", ["gemm_n7168_k5120_all", "mha_bwd_d96_all", "mha_with_lse_d64_causal_all"])
def test_a_general_task_holds_its_workloads_and_reads_as_its_largest(name):
    task = get_task(name)
    members = [TASKS[n] for n in DEFINITIONS[task.definition]]
    assert task.general and task.workloads == members and task.members == members
    largest = max(members, key=lambda t: t.dims[t.axis])
    assert task.dims == largest.dims and task.tensors == largest.tensors and task.flops == largest.flops
    assert (task.family, task.version, task.reference, task.baseline.library) == (
        largest.family, largest.version, largest.reference, largest.baseline.library,
    )  # fmt: skip
    assert task.baseline.h200_ms_seen is None  # a time seen at one workload is not the task's
    values = ", ".join(str(m.dims[task.axis]) for m in members)
    assert f"{task.axis} ∈ {{{values}}}" in task.description
    assert (task.workload, task.workload_name, task.aliases, task.former_names) == ("all", name, [], [])


def test_the_gemm_general_task_has_the_five_workloads():
    task = get_task("gemm_n7168_k5120_all")
    assert [(m.name, m.dims["M"]) for m in task.workloads] == [
        ("gemm_n7168_k5120_m70", 70), ("gemm_n7168_k5120_m232", 232), ("gemm_n7168_k5120_m972", 972),
        ("gemm_n7168_k5120_m2379", 2379), ("gemm_n7168_k5120", 8192),
    ]  # fmt: skip
    assert [m.workload for m in task.workloads] == ["m70", "m232", "m972", "m2379", "m8192"]
    assert get_task("mha_bwd_d96_all").workloads[-1].workload == "s16384"


def test_general_names_resolve_and_near_misses_name_them():
    assert get_task(" GEMM_N7168_K5120_ALL ") is GENERAL["gemm_n7168_k5120_all"]
    assert resolve_names(["general"]) == list(GENERAL)
    assert resolve_names(["gemm_n7168_k5120_all", "gemm", "mha_bwd_d96_all"])[0] == "gemm_n7168_k5120_all"
    with pytest.raises(UnknownName) as task:
        get_task("gemm_n7168_k5120_al")
    assert str(task.value).startswith("unknown task 'gemm_n7168_k5120_al'; closest: gemm_n7168_k5120_all")
    with pytest.raises(UnknownName) as group:
        resolve_names(["mha_bwd_d96_alll"])
    assert str(group.value).startswith("unknown task or group 'mha_bwd_d96_alll'; closest: mha_bwd_d96_all")
    assert "\n" not in str(group.value)
    with pytest.raises(UnknownName):  # fp8 definitions have one workload: no general task
        get_task("fp8_gemm_nt_1d2d_n4096_k7168_all")


def test_the_definitions_reference_answer_serves_its_general_task():
    for name, task in GENERAL.items():
        assert answer_key(task) == answer_key(task.workloads[0]), name
        for arch in Arch:
            assert answer_path(name, arch) == answer_path(task.workloads[0].name, arch)
    assert reference_answer("gemm_n7168_k5120_all", "sm_90a") == reference_answer("gemm_n7168_k5120_m70", "sm_90a")


def test_python_m_tasks_lists_the_general_group():
    done = subprocess.run([sys.executable, "-m", "tasks", "general"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    assert any(line.split()[:3] == ["general", str(len(GENERAL)), "tasks"] for line in done.stdout.splitlines())
    blocks = {block.split()[0]: block for block in done.stdout.split("\n\n") if block.strip()}
    assert [name for name in blocks if name in GENERAL] == list(GENERAL)
    gemm = blocks["gemm_n7168_k5120_all"].splitlines()
    assert gemm[1].startswith(
        "  gemm_n7168_k5120 at every workload, M ∈ {70, 232, 972, 2379, 8192} (dims: the largest's)"
    )
    assert "dims M=8192 N=7168 K=5120" in gemm[1]
