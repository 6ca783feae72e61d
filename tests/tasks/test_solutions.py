"""The reference solutions (tasks/solutions/<arch>/<key>.md, one per definition, the GEMMs sharing one, generated
from our Triton kernels by tasks/solutions/dev/generate.py): every task has one per arch; each file compiles
with the real ptxas, matches its .entry ABI and holds the arch's target instructions in SASS (statically: no GPU
here); it plans at every workload it serves and cross-checks at the smallest and largest of each definition; the
generator reproduces the committed files; and the kernels compute the references' results in Triton's CPU
interpreter."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tasks.catalog import CORE, GROUPS, TASKS, get_task
from tasks.schema import Arch
from tasks.solutions import answer_key, answered_by, available, reference_answer
from tasks.solutions.check_all import main as check_all
from tasks.solutions.check_all import sample
from tools import ptx as ptx_text
from tools.answer import extract_solution
from tools.crosscheck import cross_check
from tools.evaluation import Evaluation, Stage, Status
from tools.pipeline import evaluate_answer
from tools.plan import plan_launches
from tools.solution import TensorArg, TensorMapArg

ROOT = Path(__file__).parents[2]
ANSWERS = available()
# One task per answer file, the core one where the file serves it: each file is compiled once.
FILES = sorted({(answer_key(get_task(t)), a) for t, a in ANSWERS})
SERVING = {key: next((t for t in answered_by(key) if t in CORE), answered_by(key)[0]) for key, _ in FILES}
FILE_TASKS = [(SERVING[key], arch) for key, arch in FILES]
SAMPLED = [(t, a) for t, a in ANSWERS if t in sample()]
EXPECTED_TARGETS = {"sm_90a": {"wgmma", "tma"}, "sm_100a": {"tcgen05", "tmem", "tma"}}  # fp8's: QGMMA, UTCQMMA


def _ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{task}-{arch}" for task, arch in pairs]


def test_every_task_has_an_answer_per_arch():
    assert len(TASKS) == 82 + 38 + 4 + 1 + 8
    missing = [(t, a) for t in TASKS for a in ("sm_90a", "sm_100a") if (t, a) not in ANSWERS]
    assert not missing
    assert len(FILES) == 2 * 28  # 1 GEMM, 14 MHA, 4 GQA, the fp8 GEMM's and 8 fp8 attention definitions, per arch


@pytest.mark.parametrize(("task", "arch"), ANSWERS, ids=_ids(ANSWERS))
def test_an_answer_plans_at_every_workload_it_serves(task, arch):
    solution = _solution(answer_key(get_task(task)), arch)
    plan = plan_launches(solution.launch, get_task(task), Arch(arch))
    # Every tensor map views its whole buffer at this workload's dims (the shape is filled in, not baked in).
    numel = {b.name: math.prod(b.shape) for b in plan.buffers}
    maps = [a.tensor_map for launch in plan.launches for a in launch.args if a.tensor_map]
    assert maps and all(math.prod(m.global_dims) == numel[m.tensor] for m in maps)


@pytest.mark.parametrize(("task", "arch"), SAMPLED, ids=_ids(SAMPLED))
def test_an_answer_cross_checks_at_the_extreme_workloads(task, arch):
    solution = _solution(answer_key(get_task(task)), arch)
    t = get_task(task)
    checks = cross_check(solution.source, plan_launches(solution.launch, t, Arch(arch)), t, Arch(arch), "ptx")
    assert not [c.message for c in checks if c.verdict == "mismatch"]
    assert any(c.verdict == "consistent" for c in checks)


_PARSED: dict = {}


def _solution(key: str, arch: str):
    if (key, arch) not in _PARSED:
        _PARSED[key, arch] = extract_solution(reference_answer(SERVING[key], arch))
    return _PARSED[key, arch]


def test_check_all_samples_every_definition_at_its_extremes_and_every_fp8_problem(capsys):
    picked = sample()
    assert {TASKS[t].definition for t in picked} == {t.definition for t in TASKS.values()}
    assert {"gemm_n2048_k4096_m93", "gemm_n2048_k4096_m8828", "mha_bwd_d96_s512", "mha_bwd_d96_s16384",
            "mha_with_lse_d96_s4096", "gqa_bwd_d128", *GROUPS["fp8"]} <= set(picked)  # fmt: skip
    assert "gemm_n2048_k4096_m289" not in picked and len(picked) == 73
    # Here (no GPU): every sampled answer compiles and is checked statically (unverified, so the run fails).
    assert check_all(["--sample", "--tasks", "fp8", "gemm_n128_k2048_m93", "--no-profile"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines()[2:] if line.startswith("|")]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == ["gemm_n128_k2048_m93", *GROUPS["fp8"]]
    assert {r.split(" | ")[1] for r in rows} == {"sm_90a"} and {r.split(" | ")[2] for r in rows} == {"unverified"}


@pytest.mark.parametrize(("task", "arch"), FILE_TASKS, ids=_ids(FILE_TASKS))
def test_answer_parses_plans_and_records_its_origin(task, arch):
    text = reference_answer(task, arch)
    solution = extract_solution(text)
    plan = plan_launches(solution.launch, get_task(task), Arch(arch))
    entries = ptx_text.entries(solution.source)
    assert [launch.kernel for launch in plan.launches] == list(entries)  # one entry per launch, in order
    assert ptx_text.directives(solution.source)["target"] == arch
    assert "python -m tasks.solutions.dev.generate" in text and "tasks/solutions/dev/kernels/" in text
    assert "Triton 3.6.0" in text


@pytest.fixture(scope="module")
def evaluations() -> dict[tuple[str, str], Evaluation]:
    with ThreadPoolExecutor(4) as pool:  # the work is in ptxas and nvdisasm subprocesses
        futures = {
            (t, a): pool.submit(evaluate_answer, reference_answer(t, a), get_task(t), Arch(a)) for t, a in FILE_TASKS
        }
    return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize(("task", "arch"), FILE_TASKS, ids=_ids(FILE_TASKS))
def test_answer_compiles_with_its_targets_in_sass(evaluations, task, arch):
    ev = evaluations[(task, arch)]
    assert ev.status is Status.UNVERIFIED, ev.message
    targets = ev.stage(Stage.SASS).detail["targets"]
    assert {g for g, t in targets.items() if t["sass"]} >= EXPECTED_TARGETS[arch]
    if TASKS[task].family.startswith("fp8_"):  # the MMAs take fp8 operands: QGMMA, UTCQMMA (kind::f8f6f4)
        mma = targets["wgmma" if arch == "sm_90a" else "tcgen05"]["sass_matches"]
        assert mma and all(op.startswith("QGMMA" if arch == "sm_90a" else "UTCQMMA") for op in mma)


FP8_ATTENTION = sorted({(key, arch) for key, arch in FILES if TASKS[SERVING[key]].family == "fp8_attention_fwd"})


@pytest.mark.parametrize(("key", "arch"), FP8_ATTENTION, ids=_ids(FP8_ATTENTION))
def test_fp8_attention_answers_multiply_fp8_operands_only(key, arch):
    """Both products, Q·Kᵀ and P·V, are e4m3 MMAs (P rounded to e4m3, V as given): no bf16 MMA hides the P·V
    product (the easy way around Hopper's K-major rule for fp8), and the descales reach the kernel as pointers."""
    solution = _solution(key, arch)
    if arch == "sm_90a":
        mmas = re.findall(r"wgmma\.mma_async\S*", solution.source)
        assert len(mmas) >= 4 and all(m.endswith(".e4m3.e4m3") for m in mmas), sorted(set(mmas))
    else:
        mmas = re.findall(r"tcgen05\.mma\S*", solution.source)
        assert len(mmas) >= 4 and all(m.endswith(".kind::f8f6f4") for m in mmas), sorted(set(mmas))
    (launch,) = solution.launch.launches
    assert [a.tensor for a in launch.args if isinstance(a, TensorArg)] == ["LSE", "descale_q", "descale_k", "descale_v"]
    assert [a.tensor_map for a in launch.args if isinstance(a, TensorMapArg)] == ["Q", "K", "V", "O"]


# --------------------------------------------------------------- the generator (needs Triton 3.6.0)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


needs_triton = pytest.mark.skipif(_triton_version() is None, reason="triton is not installed (pip install .[generate])")


@needs_triton
def test_join_ptx_keeps_one_header_and_dedupes_globals():
    from tasks.solutions.dev.generate import join_ptx

    def module(entry: str, string: str) -> str:
        return (
            ".version 9.0\n.target sm_90a\n.address_size 64\n\n.extern .shared .align 16 .b8 global_smem[];\n"
            f".global .align 1 .b8 _$_str[3] = {{{string}}};\n\n.visible .entry {entry}()\n{{\n\tret;\n}}\n"
        )

    joined = join_ptx([module("a", "65, 66, 0"), module("b", "65, 66, 0"), module("c", "67, 68, 0")])
    assert joined.count(".version 9.0") == 1 and joined.count("global_smem[]") == 1
    assert joined.count("_$_str[3] = {65, 66, 0}") == 1  # identical definitions kept once
    assert "_$_str_2[3] = {67, 68, 0}" in joined  # a clash is renamed
    assert list(ptx_text.entries(joined)) == ["a", "b", "c"]


@needs_triton
def test_launch_args_follow_tritons_abi():
    from tasks.solutions.dev.generate import launch_args, program_for, signature

    task = get_task("attn_fwd")
    program = program_for(task, Arch.SM_90A)
    launch = program.launches[0]
    sig, attrs = signature(launch, task, program)
    assert sig["q_desc"] == "tensordesc<bf16[128,128]>" and sig["lse_ptr"] == "*fp32" and sig["HEAD_DIM"] == "constexpr"
    assert attrs == {(4,): [["tt.divisibility", 16]]}
    meta = [{"swizzle": 3, "block_size": [128, 64], "fp4_padded": False}] * 4
    args = launch_args(launch, meta)
    assert args[0] == {"tensor_map": "Q", "shape": ["B*H*S", "D"], "box": [128, 64], "swizzle": "128B",
                       "l2_promotion": "128B"}  # fmt: skip
    assert args[1:5] == [{"scalar": "B*H*S", "type": "u32"}, {"scalar": "D", "type": "u32"},
                         {"scalar": "D", "type": "u64"}, {"scalar": 1, "type": "u64"}]  # fmt: skip
    assert args[5]["shape"] == ["B*H*S", "D"]  # K: every query head has its own here
    null = {"scalar": 0, "type": "u64"}  # Triton's global and profile scratch pointers
    assert args[20:] == [{"tensor": "LSE"}, {"scalar": "rsqrt(D)", "type": "f32"}, {"scalar": "S", "type": "s32"},
                         null, null]  # fmt: skip
    gqa = launch_args(program_for(get_task("gqa_with_lse_d128"), Arch.SM_90A).launches[0], meta)
    assert gqa[0]["shape"] == ["B*H*S", "D"] and gqa[5]["shape"] == ["B*HKV*S", "D"]


@pytest.mark.slow
@pytest.mark.skipif(_triton_version() != "3.6.0", reason="the answers were generated by Triton 3.6.0")
@pytest.mark.parametrize(
    ("task", "arch"),
    [("gemm_n7168_k5120", "sm_90a"), ("mha_bwd_d128_causal", "sm_100a"), ("fp8_mha_with_lse_d96_causal", "sm_90a")],
)
def test_generator_reproduces_the_committed_answer(task, arch):
    from tasks.solutions.dev.generate import build_answer

    answer, _ = build_answer(get_task(task), Arch(arch))
    assert answer == reference_answer(task, arch), "regenerate: python -m tasks.solutions.dev.generate"


@pytest.mark.slow
@needs_triton
def test_kernels_match_the_references_in_the_interpreter():
    """Every configured task, with the table's config and variants taking the other code paths, at small
    shapes in Triton's CPU interpreter (a fresh process: TRITON_INTERPRET must be set before Triton loads)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tasks.solutions.dev.cpu_check", "--variants", "--json"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed
    assert {r["task"] for r in results} >= {*CORE, *GROUPS["fp8"]}
