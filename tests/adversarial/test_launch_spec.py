"""Launch specs a hostile model writes: nesting that would blow json's recursion, integers Python will not
read or print, sizes that add up to more than any GPU holds, more launches, arguments or buffers than any
kernel needs. Each is an extract_error fed back to the model, from every command, and a run that meets one
goes on and stays resumable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.loop.store import RunFolder
from agent.solve import main as solve
from tasks.catalog import get_task
from tasks.schema import Arch
from tests.adversarial.helpers import answer, fill_ok
from tools.compile import main as compile_main
from tools.evaluate import main as evaluate_main
from tools.options import EvalOptions
from tools.pipeline import extract
from tools.solution import MAX_ARGS, MAX_LAUNCHES, MAX_SCRATCH

PTX = fill_ok().split("```ptx\n", 1)[1].split("```", 1)[0]


def spec_with(**fields: object) -> str:
    launch = {"kernel": "fill_kernel", "grid": ["cdiv(M*N,256)", 1, 1], "block": [256, 1, 1],
              "args": [{"tensor": "C"}, {"scalar": "M*N", "type": "u32"}]}  # fmt: skip
    return json.dumps({"launches": [launch | fields]})


HOSTILE = {
    "nested_100000_deep": ('{"launches": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 32 levels"),
    "integer_of_5000_digits": (
        spec_with(shared_bytes=0).replace('"args"', '"shared_bytes": 1' + "0" * 5000 + ', "args"', 1),
        "an integer of 5,001 digits",
    ),
    "cluster_of_4000_digit_extents": (
        spec_with().replace('"args"', f'"cluster": [{10**3999}, {10**3999}, 1], "args"', 1),
        "an integer of 4,000 digits",
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_compile_refuses_in_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text, why = HOSTILE[case]
    path = tmp_path / "answer.md"
    path.write_text(answer(PTX, text))
    assert compile_main([str(path), "--arch", "sm_90a", "--task", "gemm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and why in err and "launch spec is refused" in err


@pytest.mark.parametrize("case", HOSTILE)
def test_evaluate_reports_an_extract_error(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text, why = HOSTILE[case]
    path = tmp_path / "answer.md"
    path.write_text(answer(PTX, text))
    assert evaluate_main([str(path), "--task", "gemm", "--arch", "sm_90a", "--json"]) == 0
    evaluation = json.loads(capsys.readouterr().out)
    assert evaluation["status"] == "extract_error" and why in evaluation["message"]


def test_a_run_records_each_and_resumes(runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer(PTX, text) for text, _ in HOSTILE.values()] + [fill_ok()]))
    args = ["task=gemm", "arch=sm_90a", "llm=scripted", f"llm.path={script}", "max_turns=4", "eval.gpu=false",
            f"runs_dir={runs_dir}", "run_id=hostile-specs"]  # fmt: skip
    assert solve(args) == 0
    turns = RunFolder(runs_dir / "hostile-specs").turns()
    assert [t.evaluation.status.value for t in turns] == ["extract_error"] * 3 + ["unverified"]
    for turn, (_, why) in zip(turns, HOSTILE.values(), strict=False):
        assert why in turn.feedback  # the model is told, like for any bad spec
    assert solve(["resume=hostile-specs", f"runs_dir={runs_dir}"]) == 0  # nothing left to do, no crash
    assert "Traceback" not in capsys.readouterr().err


def test_scratch_is_capped_in_sum(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # As many buffers as a spec may hold, 16 GiB each, passed the per-buffer cap; together they are 1 TB.
    scratch = [{"name": f"s{i}", "dtype": "float32", "shape": [4 << 30]} for i in range(MAX_SCRATCH)]
    launch = json.loads(spec_with())
    path = tmp_path / "answer.md"
    path.write_text(answer(PTX, json.dumps({**launch, "scratch": scratch})))
    assert evaluate_main([str(path), "--task", "gemm", "--arch", "sm_90a", "--json"]) == 0
    evaluation = json.loads(capsys.readouterr().out)
    assert evaluation["status"] == "extract_error"
    assert "scratch[1] ('s1'): 16.0 GiB brings the scratch to 32.0 GiB, over the 16 GiB cap" in evaluation["message"]


@pytest.mark.parametrize(
    ("field", "count", "cap"),
    [("scratch", 50_000, MAX_SCRATCH), ("launches", 10_000, MAX_LAUNCHES), ("args", 10_000, MAX_ARGS)],
)
def test_counts_no_kernel_needs_are_refused_at_once(
    field: str, count: int, cap: int, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # 50,000 scratch buffers (a 2.4 MB answer) took 248 s to plan, each name compared with every earlier one.
    launch = json.loads(spec_with())["launches"][0]
    spec = {"launches": [launch]}
    if field == "scratch":
        spec["scratch"] = [{"name": f"s{i}", "dtype": "float32", "shape": [4]} for i in range(count)]
    elif field == "launches":
        spec["launches"] = [launch] * count
    else:
        spec["launches"] = [launch | {"args": [{"tensor": "C"}] * count}]
    path = tmp_path / "answer.md"
    path.write_text(answer(PTX, json.dumps(spec)))
    start = time.perf_counter()
    assert evaluate_main([str(path), "--task", "gemm", "--arch", "sm_90a", "--json"]) == 0
    assert time.perf_counter() - start < 10
    evaluation = json.loads(capsys.readouterr().out)
    assert evaluation["status"] == "extract_error"
    assert field in evaluation["message"] and f"at most {cap} items" in evaluation["message"]


def test_a_spec_at_every_cap_plans_well_inside_the_static_limit() -> None:
    # The largest spec the caps let through: planning it is linear, and takes a small part of the static limit.
    tmap = {"tensor_map": "A", "box": [64, 64], "swizzle": "128B"}
    args = [{"tensor": f"s{i % MAX_SCRATCH}"} for i in range(MAX_ARGS - 1)] + [tmap]
    launch = json.loads(spec_with())["launches"][0] | {"args": args}
    scratch = [{"name": f"s{i}", "dtype": "float32", "shape": ["M", 4]} for i in range(MAX_SCRATCH)]
    spec = json.dumps({"launches": [launch] * MAX_LAUNCHES, "scratch": scratch})
    static = extract(get_task("gemm"), Arch.SM_90A, answer=answer(PTX, spec))
    assert static.plan is not None and len(static.plan.launches) == MAX_LAUNCHES, static.stages[0].message
    assert static.stages[0].seconds < EvalOptions().static_timeout_s / 20
