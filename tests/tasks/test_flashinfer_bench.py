"""FlashInfer-Bench files as tasks (tasks/flashinfer_bench.py): our models round-trip, agree with their published
pydantic models (the `flashinfer-bench` package's module files, loaded alone: the package itself needs flashinfer),
map onto our Task, refuse bad input in one line, and run the definition's own reference."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from tasks import flashinfer_bench as fib
from tasks.catalog import TARGETS, get_task, resolve_names
from tasks.inputs import draw_inputs
from tasks.references import run_reference
from tasks.schema import Arch, UnknownName
from tasks.solutions import SHARED, answer_key

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "flashinfer_bench"
GEMM = FIXTURES / "gemm_bf16_n4096_k4096.json"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def loaded_files_stay_here(monkeypatch):
    """The files a test loads are not left in this process's environment for later tests' child processes."""
    monkeypatch.setenv(fib.ENV, "")


def their_models() -> types.SimpleNamespace:
    """FlashInfer-Bench's own data models, from the installed package's files (`pip install --no-deps
    flashinfer-bench==0.1.2`), without running its __init__ (which imports flashinfer and tvm-ffi)."""
    spec = importlib.util.find_spec("flashinfer_bench")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flashinfer-bench is not installed: pip install --no-deps flashinfer-bench==0.1.2")
    root = Path(spec.submodule_search_locations[0])
    saved = {k: v for k, v in sys.modules.items() if k == "flashinfer_bench" or k.startswith("flashinfer_bench.")}
    try:
        for name, folder in (("flashinfer_bench", root), ("flashinfer_bench.data", root / "data")):
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
        definition = importlib.import_module("flashinfer_bench.data.definition")
        trace = importlib.import_module("flashinfer_bench.data.trace")
        return types.SimpleNamespace(Definition=definition.Definition, Trace=trace.Trace, Workload=trace.Workload)
    finally:
        for name in [k for k in sys.modules if k == "flashinfer_bench" or k.startswith("flashinfer_bench.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def gemm_data(**changes) -> dict:
    data = json.loads(GEMM.read_text())
    data.update(changes)
    return data


def write(tmp_path: Path, data: dict, workloads: list[dict] | None = None, name: str = "d") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    if workloads is not None:
        path.with_suffix(".jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    return path


def workload(m: int, uid: str = "u1", **inputs) -> dict:
    return {"uuid": uid, "axes": {"M": m}, "inputs": inputs or {"A": {"type": "random"}, "B": {"type": "random"}}}


# ------------------------------------------------------------------------------------------------ models


def test_definition_and_workloads_round_trip():
    data = json.loads(GEMM.read_text())
    ours = fib.Definition.model_validate(data)
    again = fib.Definition.model_validate_json(ours.model_dump_json())
    assert again == ours
    dumped = ours.model_dump(mode="json", exclude_none=True, exclude={"ptxbench"})
    assert {k: v for k, v in dumped.items() if v != []} == {k: v for k, v in data.items() if v != []}
    for line in GEMM.with_suffix(".jsonl").read_text().splitlines():
        trace = fib.Trace.model_validate_json(line)
        assert trace.solution is None and trace.evaluation is None
        assert json.loads(trace.model_dump_json()) == json.loads(line)


def test_trace_round_trip_keeps_nan_errors():
    env = fib.Environment(hardware="NVIDIA H200", libs={"ptxas": "13.0"})
    evaluation = fib.TraceEvaluation(
        status=fib.TraceStatus.INCORRECT_NUMERICAL, environment=env, timestamp="2026-12-03T00:00:00Z",
        correctness=fib.Correctness(max_relative_error=float("nan"), max_absolute_error=3.5),
    )  # fmt: skip
    trace = fib.Trace(definition="d", workload=fib.Workload(axes={"M": 1}, inputs={}, uuid="u"), solution="s",
                      evaluation=evaluation)  # fmt: skip
    text = trace.model_dump_json()
    assert '"NaN"' in text
    back = fib.Trace.model_validate_json(text)
    assert back.evaluation.correctness.max_absolute_error == 3.5
    assert back.evaluation.correctness.max_relative_error != back.evaluation.correctness.max_relative_error  # NaN


def test_their_models_accept_what_ours_accept_and_write():
    theirs = their_models()
    data = json.loads(GEMM.read_text())
    ours = fib.Definition.model_validate(data)
    assert theirs.Definition.model_validate(data).name == ours.name
    assert theirs.Definition.model_validate_json(ours.model_dump_json(exclude_none=True)).name == ours.name
    for line in GEMM.with_suffix(".jsonl").read_text().splitlines():
        assert theirs.Trace.model_validate_json(fib.Trace.model_validate_json(line).model_dump_json()).definition


def test_our_fields_are_theirs():
    """Our models name exactly the fields of theirs (our `ptxbench` extension aside), so a file one reads, the other
    reads too; their JSON schema is the published one."""
    theirs = their_models()
    pairs = [(fib.Definition, theirs.Definition), (fib.Trace, theirs.Trace), (fib.Workload, theirs.Workload)]
    for ours, other in pairs:
        assert set(ours.model_fields) - {"ptxbench"} == set(other.model_json_schema()["properties"])


# ------------------------------------------------------------------------------------------------ tasks


def test_a_gemm_definition_with_three_workloads_is_three_tasks():
    names = resolve_names([str(GEMM)], files=True)
    assert names == ["gemm_bf16_n4096_k4096_m256", "gemm_bf16_n4096_k4096_m248", "gemm_bf16_n4096_k4096_m8192"]
    task = get_task(names[2])
    assert task.dims == {"M": 8192, "N": 4096, "K": 4096}
    assert [(t.name, t.shape, t.role) for t in task.tensors] == [
        ("A", ["M", "K"], "input"), ("B", ["N", "K"], "input"), ("C", ["M", "N"], "output")
    ]  # fmt: skip
    assert task.targets == TARGETS and task.family == "gemm" and task.baseline is None
    assert task.flops == "2*M*N*K" and task.definition == "gemm_bf16_n4096_k4096" and task.axis == "M"
    assert answer_key(task) == SHARED["gemm"]  # our GEMM's reference answer serves any M, N, K
    assert get_task(str(GEMM), files=True).name == names[0]  # task=FILE: its first workload
    assert get_task(f"{GEMM}#m8192", files=True).name == names[2]  # or the one it names
    assert resolve_names([f"{GEMM}#0b7e2f0c-8a8e-4a6f-a7d1-2c3b4d5e6f02"], files=True) == [names[1]]
    with pytest.raises(UnknownName, match=r"#m7: one of its workloads \(m256, m248, m8192\)"):
        get_task(f"{GEMM}#m7", files=True)


def test_a_definition_with_several_workloads_is_also_one_shape_general_task(tmp_path):
    names = resolve_names([str(GEMM)], files=True)
    assert "gemm_bf16_n4096_k4096_all" not in names  # tasks=FILE: one task per workload, as the catalog's groups
    general = get_task("gemm_bf16_n4096_k4096_all")  # registered beside them, by name
    assert [t.name for t in general.workloads] == names and general.general and general.workload == "all"
    assert general.dims == {"M": 8192, "N": 4096, "K": 4096} and general.baseline is None  # the largest's; timed alone
    assert general.definition == "gemm_bf16_n4096_k4096" and general.source == str(GEMM.resolve())
    assert get_task(f"{GEMM}#all", files=True).name == general.name  # task=FILE#all
    assert answer_key(general) == SHARED["gemm"]
    one = write(tmp_path, gemm_data(name="gemm_once"), [workload(64)])
    with pytest.raises(UnknownName, match=r"#all: a definition with a var axis and two or more workloads"):
        get_task(f"{one}#all", files=True)
    with pytest.raises(UnknownName, match="unknown task"):
        get_task("gemm_once_all")


def test_a_gemm_on_other_tensors_gets_no_shared_answer(tmp_path):
    fp16 = gemm_data(name="gemm_fp16_test")
    for spec in (*fp16["inputs"].values(), *fp16["outputs"].values()):
        spec["dtype"] = "float16"
    task = get_task(str(write(tmp_path, fp16, [workload(64)])), files=True)
    assert answer_key(task) == "gemm_fp16_test"


def test_targets_by_op_type_extension_and_baseline(tmp_path):
    attention = gemm_data(name="attn_test", op_type="gqa_ragged")
    assert get_task(str(write(tmp_path, attention, [workload(8)], "a")), files=True).family == "attention_fwd"
    unknown = gemm_data(name="moe_test", op_type="moe")
    with pytest.raises(UnknownName, match=r'op_type: .*"ptxbench": \{"targets": "gemm"\}'):
        get_task(str(write(tmp_path, unknown, [workload(8)], "m")), files=True)
    given = gemm_data(name="moe_test2", op_type="moe", ptxbench={"targets": "gemm", "baseline": "cublas_gemm"})
    task = get_task(str(write(tmp_path, given, [workload(8)], "g")), files=True)
    assert task.targets[Arch.SM_90A] == TARGETS[Arch.SM_90A]
    assert task.baseline.call == "cublas_gemm" and task.baseline.library == "cuBLAS"
    wrong = gemm_data(name="moe_test3", ptxbench={"baseline": "cublas"})
    with pytest.raises(UnknownName, match=r"ptxbench\.baseline: one of cublas_gemm"):
        get_task(str(write(tmp_path, wrong, [workload(8)], "w")), files=True)


def test_baseline_names_are_ours():
    from tasks.baselines import BASELINES

    assert set(fib.BASELINE_LIBRARIES) == set(BASELINES)


def test_a_folder_is_every_definition_in_it(tmp_path):
    root = tmp_path / "set"
    (root / "definitions" / "gemm").mkdir(parents=True)
    (root / "workloads" / "gemm").mkdir(parents=True)
    for n in ("one", "two"):
        (root / "definitions" / "gemm" / f"gemm_{n}.json").write_text(json.dumps(gemm_data(name=f"gemm_{n}")))
        trace = {"definition": f"gemm_{n}", "workload": workload(16), "solution": None, "evaluation": None}
        other = {"definition": "someone_else", "workload": workload(99), "solution": None, "evaluation": None}
        (root / "workloads" / "gemm" / f"gemm_{n}.jsonl").write_text(json.dumps(trace) + "\n" + json.dumps(other))
    assert resolve_names([str(root)], files=True) == ["gemm_one_m16", "gemm_two_m16"]


def test_a_name_of_our_catalog_is_refused(tmp_path):
    path = write(tmp_path, gemm_data(name="gemm_n4096_k4096"), [workload(8192)])
    with pytest.raises(UnknownName, match="gemm_n4096_k4096_m8192 is our task"):
        get_task(str(path), files=True)


def test_a_name_from_anywhere_but_the_command_line_never_opens_a_file():
    """A run folder, a request or a label names tasks by get_task's default: a path there is an unknown name."""
    with pytest.raises(UnknownName, match="unknown task"):
        get_task(str(GEMM))
    with pytest.raises(UnknownName, match="unknown task or group"):
        resolve_names([str(GEMM)])


def test_a_child_process_finds_the_tasks_by_name():
    """The GPU worker is a child process: it knows the loaded tasks by name through PTXBENCH_TASK_FILES."""
    resolve_names([str(GEMM)], files=True)
    code = ("from tasks.catalog import get_task; t = get_task('gemm_bf16_n4096_k4096_m248'); print(t.dims['M']); "
            "print(len(get_task('gemm_bf16_n4096_k4096_all').workloads))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ), check=True)  # fmt: skip
    assert out.stdout.split() == ["248", "3"]


# ------------------------------------------------------------------------------------------------ bad input


def one_line(error: pytest.ExceptionInfo, path: Path, field: str, expected: str) -> None:
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"{path.resolve()}: {field}: ")
    assert expected in text


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ({"inputs": {"A": {"shape": ["M", "L"], "dtype": "bfloat16"}}}, "inputs.A.shape", "axis 'L' is not declared"),
        ({"outputs": {"C": {"shape": ["M", "N"], "dtype": "float4_e2m1"}}}, "outputs.C.dtype", "cannot run 'float4"),
        ({"reference": "import torch\n\ndef forward(A, B):\n    return A @ B.T"}, "reference", "function `run`"),
        ({"reference": "def run(A, B:\n"}, "reference", "Python code"),
        ({"axes": {"M": {"type": "var"}, "N": {"type": "const"}}}, "axes.N.const.value", "Field required"),
    ],
)
def test_a_bad_definition_is_one_line(tmp_path, change, field, expected):
    path = write(tmp_path, gemm_data(**change), [workload(8)])
    with pytest.raises(UnknownName) as error:
        get_task(str(path), files=True)
    one_line(error, path, field, expected)


def test_a_workload_without_a_var_axis_is_one_line(tmp_path):
    bad = {"uuid": "u", "axes": {"N": 4096}, "inputs": {"A": {"type": "random"}, "B": {"type": "random"}}}
    path = write(tmp_path, gemm_data(), [workload(8), bad])
    with pytest.raises(UnknownName) as error:
        get_task(str(path), files=True)
    one_line(error, path.with_suffix(".jsonl"), "line 2.axes.M", "a value for the var axis M")


def test_definition_without_its_workloads_is_one_line(tmp_path):
    path = write(tmp_path, gemm_data(name="alone"))
    with pytest.raises(UnknownName) as error:
        get_task(str(path), files=True)
    one_line(error, path, "workloads", "a workload file giving M")


# ------------------------------------------------------------------------------------------------ reference


def test_the_definitions_own_reference_runs_on_drawn_inputs():
    task = get_task("gemm_bf16_n4096_k4096_m248") if resolve_names([str(GEMM)], files=True) else None
    small = task.model_copy(update={"dims": {"M": 3, "N": 5, "K": 8}})
    inputs = draw_inputs(small, small.dims, seed=1, device="cpu")
    assert inputs["A"].shape == (3, 8) and inputs["A"].dtype == torch.bfloat16
    out = run_reference(task.reference, inputs, task.params)
    assert out["C"].dtype == torch.float32
    torch.testing.assert_close(out["C"], (inputs["A"] @ inputs["B"].T).float())


def test_scalars_and_safetensors_inputs(tmp_path):
    from safetensors.torch import save_file

    root = tmp_path / "set"
    (root / "definitions" / "elementwise").mkdir(parents=True)
    (root / "workloads" / "elementwise").mkdir(parents=True)
    (root / "blob").mkdir()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    save_file({"x": x}, str(root / "blob" / "x.safetensors"))
    data = {
        "name": "scale_rows", "op_type": "elementwise", "ptxbench": {"targets": "gemm"},
        "axes": {"R": {"type": "var"}, "C": {"type": "const", "value": 3}},
        "inputs": {"X": {"shape": ["R", "C"], "dtype": "float32"}, "alpha": {"shape": None, "dtype": "float32"}},
        "outputs": {"Y": {"shape": ["R", "C"], "dtype": "float32"}},
        "reference": "def run(X, alpha):\n    return X * alpha",
    }  # fmt: skip
    (root / "definitions" / "elementwise" / "scale_rows.json").write_text(json.dumps(data))
    x_spec = {"type": "safetensors", "path": "blob/x.safetensors", "tensor_key": "x"}
    wl = {"uuid": "w1", "axes": {"R": 2}, "inputs": {"X": x_spec, "alpha": {"type": "scalar", "value": 2.5}}}
    (root / "workloads" / "elementwise" / "scale_rows.jsonl").write_text(json.dumps(wl) + "\n")
    (root / "blob" / "x.safetensors").rename(root / "blob" / "moved.safetensors")
    with pytest.raises(UnknownName, match=r"w1\.inputs\.X\.path: a file under the trace set's root"):
        resolve_names([str(root)], files=True)
    (root / "blob" / "moved.safetensors").rename(root / "blob" / "x.safetensors")
    (name,) = resolve_names([str(root)], files=True)
    task = get_task(name)
    assert task.params == {"alpha": 2.5} and task.tensor("X").init == "derived" and task.flops == "0"
    inputs = draw_inputs(task, task.dims, seed=0, device="cpu")
    torch.testing.assert_close(inputs["X"], x)
    torch.testing.assert_close(run_reference(task.reference, inputs, task.params)["Y"], x * 2.5)


def test_the_service_and_mcp_server_never_open_files():
    """docs/security.md: no request names a file (its reference would run in our worker)."""
    for module in ("tools/serve/runner.py", "tools/mcp/server.py", "agent/rl/scoring.py", "agent/loop/run.py"):
        calls = [line for line in (REPO / module).read_text().splitlines() if "get_task(" in line]
        assert calls and not any("files=True" in line for line in calls), module


def test_the_command_line_turns_files_into_names():
    from agent import cli

    pairs = cli.parse_pairs([f"task={GEMM}#m8192", f"tasks=gemm,{GEMM}"])
    assert pairs["task"] == "gemm_bf16_n4096_k4096_m8192"
    assert pairs["tasks"] == "gemm,gemm_bf16_n4096_k4096_m256,gemm_bf16_n4096_k4096_m248,gemm_bf16_n4096_k4096_m8192"
    with pytest.raises(cli.ConfigError, match="an existing definition JSON file"):
        cli.parse_pairs(["task=missing/def.json"])
