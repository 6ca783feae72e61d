"""FlashInfer-Bench's file formats as tasks: our own models of its Definition, Workload and Trace (the FlashInfer Trace
schema of the `flashinfer-bench` package, 0.1.2 and its repository's main branch of 2026-04-30, which agree), the
loading of a definition file with its workloads into our Tasks, and the one-line refusals of a file we cannot run.

A Definition names axes (const with a value, var given by each workload), inputs and outputs (shapes over the axes,
scalars with no shape, dtypes) and a Python reference whose `run` takes the inputs in order and returns the outputs.
A Workload gives the var axes' values and each input: random, a scalar, or a tensor in a safetensors file.

Each (definition, workload) becomes one Task, named `<definition>_<axis><value>` as the catalog names its own (the
definition's name alone when it has no var axis). Its reference is the definition's `run`, executed by the GPU worker
where the check stage runs (tasks/references.py run_reference), never here and never on a model's text. Target groups
come from `op_type` (gemm and the attention op types: the catalog's groups), or from the file's `ptxbench` extension
field; the baseline is one of ours by name (`ptxbench.baseline`) or absent, and then no speedup is reported.

Loaded tasks are kept in a registry by name, and their files in PTXBENCH_TASK_FILES, so that the GPU worker (a child
process) and later commands on the same runs find them again."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tasks.schema import DTYPE_BYTES, Arch, Baseline, TargetGroup, Task, TensorSpec, UnknownName

ENV = "PTXBENCH_TASK_FILES"  # os.pathsep-separated definition files this process and its children load
REFERENCE_PREFIX = "flashinfer_bench:"  # Task.reference / Task.derive of a file task: the prefix, then the file

# ------------------------------------------------------------------------------------------- the schema

Name = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as theirs: fields we do not know are dropped, not refused


class AxisConst(_Model):
    type: Literal["const"] = "const"
    value: Count
    description: str | None = None


class AxisVar(_Model):
    type: Literal["var"] = "var"
    description: str | None = None


Axis = Annotated[AxisConst | AxisVar, Field(discriminator="type")]


class TensorDesc(_Model):
    """An input or output: axis names outermost first (None: a scalar) and a dtype."""

    shape: list[Name] | None
    dtype: str
    description: str | None = None


class Extension(_Model):
    """Ours, in a definition's `ptxbench` field (FlashInfer-Bench ignores it): what its schema does not say."""

    targets: Literal["gemm", "attention", "fp8"] | None = Field(
        None, description="Whose target groups the task gets, for an op_type we do not know."
    )
    baseline: str | None = Field(None, description="One of our baselines by name (tasks/baselines.py).")
    tolerance: float | None = Field(None, gt=0, description="Largest rel. L2 error that passes (default 1e-2).")
    flops: str | None = Field(None, description="FLOPs as an expression over the axes (default: gemm's 2*M*N*K).")


class Definition(_Model):
    name: Name
    op_type: Name
    axes: dict[Name, Axis]
    inputs: dict[Name, TensorDesc]
    outputs: dict[Name, TensorDesc]
    reference: Name
    tags: list[Name] = Field(default_factory=list)
    description: str | None = None
    constraints: list[Name] = Field(default_factory=list)
    ptxbench: Extension | None = None

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if a.type == "var"]

    @property
    def const_axes(self) -> dict[str, int]:
        return {n: a.value for n, a in self.axes.items() if isinstance(a, AxisConst)}


class RandomInput(_Model):
    type: Literal["random"] = "random"


class ScalarInput(_Model):
    type: Literal["scalar"] = "scalar"
    value: int | float | bool


class SafetensorsInput(_Model):
    type: Literal["safetensors"] = "safetensors"
    path: Name = Field(description="Relative to the trace set's root.")
    tensor_key: Name


InputSpec = Annotated[RandomInput | ScalarInput | SafetensorsInput, Field(discriminator="type")]


class Workload(_Model):
    axes: dict[str, Count]
    inputs: dict[str, InputSpec]
    uuid: Name


class TraceStatus(StrEnum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"


class Correctness(_Model):
    """Errors against the reference; NaN where there is none to give (an output unwritten or non-finite), written
    as the string "NaN" in JSON, as theirs writes it."""

    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None

    @field_validator("max_relative_error", "max_absolute_error")
    @classmethod
    def _non_negative_or_nan(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must be non-negative or NaN")
        return value


class Performance(_Model):
    latency_ms: float = Field(0.0, ge=0.0)
    reference_latency_ms: float = Field(0.0, ge=0.0)
    speedup_factor: float = Field(0.0, ge=0.0)


class Environment(_Model):
    hardware: Name
    libs: dict[str, str] = Field(default_factory=dict)


class TraceEvaluation(_Model):
    status: TraceStatus
    environment: Environment
    timestamp: Name
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None


class Trace(_Model):
    """A benchmark record; with solution and evaluation None, a workload trace (how workload JSONL files hold them)."""

    definition: Name
    workload: Workload
    solution: str | None = None
    evaluation: TraceEvaluation | None = None


# ------------------------------------------------------------------------------------------ refusals


class TaskFileError(UnknownName):
    """A definition or workload file we cannot turn into tasks: one line naming the file, the field and what was
    expected. An UnknownName, so that every command refuses it as it refuses a misspelt task name."""

    def __init__(self, path: Path | str, field: str, expected: str):
        super().__init__(f"{path}: {field}: {expected}")


# The dtypes our harness draws, checks and launches with (tasks/schema.py DType).
RUNNABLE_DTYPES = tuple(DTYPE_BYTES)


def _pydantic_error(path: Path, error: ValidationError) -> TaskFileError:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return TaskFileError(path, field, first["msg"].removeprefix("Value error, "))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise TaskFileError(path, "(file)", f"a readable file ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise TaskFileError(path, f"line {e.lineno}", f"JSON ({e.msg})") from None


def parse_definition(data: Any, path: Path) -> Definition:
    """The definition in `data` (read from `path`), checked beyond the schema for what we need to run it."""
    try:
        definition = Definition.model_validate(data)
    except ValidationError as e:
        raise _pydantic_error(path, e) from None
    for group in ("inputs", "outputs"):
        for name, spec in getattr(definition, group).items():
            for axis in spec.shape or []:
                if axis not in definition.axes:
                    declared = ", ".join(definition.axes) or "none"
                    raise TaskFileError(path, f"{group}.{name}.shape", f"axis {axis!r} is not declared in axes "
                                        f"(declared: {declared})")  # fmt: skip
            if spec.dtype not in RUNNABLE_DTYPES:
                raise TaskFileError(path, f"{group}.{name}.dtype", f"one of {', '.join(RUNNABLE_DTYPES)} "
                                    f"(we cannot run {spec.dtype!r})")  # fmt: skip
            if spec.shape is None and group == "outputs":
                raise TaskFileError(path, f"outputs.{name}.shape", "a list of axes (a scalar output cannot be checked)")
    if set(definition.inputs) & set(definition.outputs):
        raise TaskFileError(path, "outputs", "names distinct from the inputs'")
    try:
        body = ast.parse(definition.reference).body
    except SyntaxError as e:
        raise TaskFileError(path, "reference", f"Python code ({e.msg}, line {e.lineno})") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in body):
        raise TaskFileError(path, "reference", "Python code defining a top-level function `run`")
    return definition


def load_definition(path: Path) -> Definition:
    return parse_definition(_read_json(path), path)


def _workload_lines(path: Path) -> list[tuple[str, Any]]:
    """(where, object) per workload in a .json (one object, or a list) or .jsonl file."""
    if path.suffix == ".jsonl":
        try:
            text = path.read_text()
        except OSError as e:
            raise TaskFileError(path, "(file)", f"a readable file ({e.strerror})") from None
        items = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((f"line {number}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise TaskFileError(path, f"line {number}", f"one JSON object ({e.msg})") from None
        return items
    data = _read_json(path)
    return [(f"[{i}]", item) for i, item in enumerate(data)] if isinstance(data, list) else [("", data)]


def parse_workloads(path: Path, definition: Definition) -> list[Workload]:
    """The workloads of `definition` in a workload file: bare Workloads or workload traces (their JSONL layout),
    others' lines skipped. Every var axis needs a value and every input a spec."""
    workloads = []
    for where, item in _workload_lines(path):
        prefix = f"{where}." if where else ""
        if isinstance(item, dict) and "workload" in item:
            if item.get("definition") != definition.name:
                continue
            item, prefix = item["workload"], f"{prefix}workload."
        try:
            workload = Workload.model_validate(item)
        except ValidationError as e:
            err = e.errors()[0]
            field = prefix + ".".join(str(p) for p in err["loc"])
            raise TaskFileError(path, field, err["msg"]) from None
        for axis in definition.var_axes:
            if axis not in workload.axes:
                raise TaskFileError(path, f"{prefix}axes.{axis}", f"a value for the var axis {axis} of "
                                    f"{definition.name}")  # fmt: skip
        for name in definition.inputs:
            if name not in workload.inputs:
                raise TaskFileError(path, f"{prefix}inputs.{name}", "random, scalar or safetensors")
        for name, spec in definition.inputs.items():
            if (spec.shape is None) != (workload.inputs[name].type == "scalar"):
                want = "a scalar" if spec.shape is None else "random or safetensors (the input is a tensor)"
                raise TaskFileError(path, f"{prefix}inputs.{name}", want)
        workloads.append(workload)
    return workloads


# ---------------------------------------------------------------------------------------- onto a Task


def _catalog():
    from tasks import catalog  # the catalog imports this module lazily; its tables are data for the mapping

    return catalog


ATTENTION_OP_TYPES = ("attention", "mha", "gqa", "mla", "sdpa")  # op_type prefixes/parts that are attention
# Our baselines by name → the library each calls (tasks/baselines.py BASELINES; a test keeps them equal).
BASELINE_LIBRARIES = {
    "cublas_gemm": "cuBLAS", "cudnn_attention_forward": "cuDNN", "cudnn_attention_backward": "cuDNN",
    "scaled_mm_blockwise": "cuBLAS", "cudnn_fp8_attention_forward": "cuDNN",
}  # fmt: skip


def _target_kind(definition: Definition, path: Path) -> str:
    if definition.ptxbench and definition.ptxbench.targets:
        return definition.ptxbench.targets
    op = definition.op_type.lower()
    fp8 = any(s.dtype.startswith("float8") for s in definition.inputs.values())
    if op == "gemm" or op.startswith("gemm_"):
        return "fp8" if fp8 else "gemm"
    if any(part in op for part in ATTENTION_OP_TYPES):
        return "fp8" if fp8 else "attention"
    raise TaskFileError(path, "op_type", f"gemm or an attention op type, for which we know the target "
                        f"instructions; for {definition.op_type!r} say whose to use: add "
                        '"ptxbench": {"targets": "gemm"} (or "attention", "fp8") to the definition')  # fmt: skip


def _targets(kind: str) -> dict[Arch, list[TargetGroup]]:
    catalog = _catalog()
    return catalog.FP8_TARGETS if kind == "fp8" else catalog.TARGETS


def _family(kind: str, definition: Definition) -> str:
    if kind == "fp8":
        return "fp8_gemm" if "gemm" in definition.op_type.lower() else "fp8_attention_fwd"
    return "gemm" if kind == "gemm" else "attention_fwd"


def _baseline(definition: Definition, path: Path) -> Baseline | None:
    name = definition.ptxbench.baseline if definition.ptxbench else None
    if name is None:
        return None
    if name not in BASELINE_LIBRARIES:
        raise TaskFileError(path, "ptxbench.baseline", f"one of {', '.join(BASELINE_LIBRARIES)} (or no baseline)")
    return Baseline(library=BASELINE_LIBRARIES[name], call=name, description=f"{name} (tasks/baselines.py)")


def _flops(definition: Definition, kind: str, path: Path) -> str:
    if definition.ptxbench and definition.ptxbench.flops:
        flops = definition.ptxbench.flops
    elif kind in ("gemm", "fp8") and {"M", "N", "K"} <= set(definition.axes):
        flops = "2*M*N*K"
    else:
        return "0"  # unknown: TFLOP/s read 0, speedups are unaffected
    from tasks.expr import names_in

    unknown = names_in(flops) - set(definition.axes)
    if unknown:
        raise TaskFileError(path, "ptxbench.flops", f"an expression over the axes (unknown: {', '.join(unknown)})")
    return flops


def task_name(definition: Definition, workload: Workload | None) -> str:
    if workload is None or not definition.var_axes:
        return definition.name
    axis = definition.var_axes[0]
    rest = "".join(f"_{a.lower()}{workload.axes[a]}" for a in definition.var_axes[1:])
    return f"{definition.name}_{axis.lower()}{workload.axes[axis]}{rest}"


def to_tasks(definition: Definition, workloads: list[Workload], path: Path) -> list[Task]:
    """One Task per workload (one for a definition without var axes), in the workloads' order."""
    path = path.resolve()
    kind = _target_kind(definition, path)
    baseline, flops = _baseline(definition, path), _flops(definition, kind, path)
    if definition.var_axes and not workloads:
        raise TaskFileError(path, "workloads", f"a workload file giving {', '.join(definition.var_axes)} (beside it: "
                            f"{path.stem}.jsonl, or the trace set's workloads/{definition.op_type}/"
                            f"{definition.name}.jsonl)")  # fmt: skip
    tasks: list[Task] = []
    names: set[str] = set()
    # Without a var axis every workload is the same shape: the first stands for them (their data may differ).
    for workload in (workloads if definition.var_axes else workloads[:1]) or [None]:
        given = definition.const_axes | ({a: workload.axes[a] for a in definition.var_axes} if workload else {})
        dims = {a: given[a] for a in definition.axes}  # in the definition's order
        specs = workload.inputs if workload else {}
        from_file = any(s.type == "safetensors" for s in specs.values())
        tensors = [
            TensorSpec(name=n, dtype=s.dtype, shape=s.shape, role="input",
                       init="derived" if specs.get(n, RandomInput()).type == "safetensors" else "normal")
            for n, s in definition.inputs.items() if s.shape is not None
        ] + [TensorSpec(name=n, dtype=s.dtype, shape=s.shape, role="output")
             for n, s in definition.outputs.items()]  # fmt: skip
        params = {n: s.value for n, s in specs.items() if s.type == "scalar"}
        source = f"{REFERENCE_PREFIX}{path}"
        name = task_name(definition, workload)
        if name in names:  # workloads of one shape with other data (safetensors): told apart by their uuid
            name = f"{name}_{workload.uuid[:8]}"
        names.add(name)
        tasks.append(
            Task(
                name=name,
                definition=definition.name,
                axis=definition.var_axes[0] if definition.var_axes else None,
                family=_family(kind, definition),
                description=definition.description or f"{definition.op_type} (a FlashInfer-Bench definition, {path})",
                dims=dims,
                tensors=tensors,
                params=params,
                reference=source,
                derive=f"{source}#{workload.uuid}" if from_file else None,
                tolerance=definition.ptxbench.tolerance
                if definition.ptxbench and definition.ptxbench.tolerance
                else 1e-2,
                flops=flops,
                baseline=baseline,
                targets=_targets(kind),
                source=str(path),
                workload_uuid=workload.uuid if workload else None,
            )
        )
    return tasks


# ------------------------------------------------------------------------------------ files and folders


def workload_files(path: Path, definition: Definition) -> list[Path]:
    """Where a definition's workloads are: `<stem>.jsonl` or `<stem>.workloads.jsonl` beside it, and in a trace set
    (ROOT/definitions/<op_type>/<name>.json) ROOT/workloads/<op_type>/<name>.jsonl."""
    candidates = [path.with_suffix(".jsonl"), path.with_name(f"{path.stem}.workloads.jsonl")]
    root = trace_set_root(path)
    if root is not None:
        candidates += [root / "workloads" / definition.op_type / f"{definition.name}.jsonl",
                       root / "workloads" / f"{definition.name}.jsonl"]  # fmt: skip
    return list(dict.fromkeys(p for p in candidates if p.is_file()))


def trace_set_root(path: Path) -> Path | None:
    """The trace set a file lies in (the folder above its `definitions/` or `workloads/`), or None."""
    for parent in path.resolve().parents:
        if parent.name in ("definitions", "workloads"):
            return parent.parent
    return None


_REGISTRY: dict[str, Task] = {}
_DEFINITIONS: dict[Path, tuple[Definition, dict[str, Workload]]] = {}


def load_file(path: Path | str) -> list[Task]:
    """The tasks of one definition file (its workloads found beside it), registered under their names."""
    path = Path(path).resolve()
    definition = load_definition(path)
    workloads = []
    for file in workload_files(path, definition):
        workloads += parse_workloads(file, definition)
        _check_blobs(file, workloads, trace_set_root(path) or path.parent)
    tasks = to_tasks(definition, workloads, path)
    catalog = _catalog()
    # Two or more workloads of a var axis: also the shape-general task over them, as the catalog's definitions have
    general = [catalog.general_task(tasks)] if definition.var_axes and len(tasks) > 1 else []
    for task in [*tasks, *general]:
        if task.name in catalog.TASKS or task.name in catalog.GENERAL:
            raise TaskFileError(
                path,
                "name",
                f"a definition name our catalog does not hold: {task.name} is our task "
                "(task={task.name} runs ours); rename the definition to load this file",
            )
        _REGISTRY[task.name] = task
    _DEFINITIONS[path] = (definition, {w.uuid: w for w in workloads})
    known = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    if str(path) not in known:
        os.environ[ENV] = os.pathsep.join([*known, str(path)])  # the GPU worker and ncu's launcher inherit it
    return tasks


def _check_blobs(file: Path, workloads: list[Workload], root: Path) -> None:
    """Safetensors inputs need their file, and the package, before anything runs (the worker reads them)."""
    for workload in workloads:
        for name, spec in workload.inputs.items():
            if not isinstance(spec, SafetensorsInput):
                continue
            if importlib.util.find_spec("safetensors") is None:
                raise TaskFileError(file, f"{workload.uuid}.inputs.{name}", "safetensors installed (pip install "
                                    "safetensors) to read a safetensors input")  # fmt: skip
            if not (root / spec.path).is_file():
                raise TaskFileError(file, f"{workload.uuid}.inputs.{name}.path", f"a file under the trace set's root "
                                    f"{root} ({spec.path} is not there)")  # fmt: skip


def load_dir(path: Path | str) -> list[Task]:
    """Every definition under a folder: a trace set's definitions/ or a folder of definition files."""
    path = Path(path)
    folder = path / "definitions" if (path / "definitions").is_dir() else path
    files = sorted(p for p in folder.rglob("*.json") if p.is_file())
    if not files:
        raise TaskFileError(path, "(folder)", "definition JSON files (or a trace set with definitions/)")
    return [task for f in files for task in load_file(f)]


def is_file_reference(name: str) -> bool:
    """Whether a task name given on a command line names a file or folder (rather than a catalog name): a .json file,
    or a path with a slash (a folder in the working directory is `./set` or `set/`, so no folder hides a group)."""
    name = name.strip().partition("#")[0]
    return name.endswith((".json", ".jsonl")) or os.sep in name


def resolve(item: str) -> list[str]:
    """The task names a file or folder holds, one per workload, loading them; `FILE#WORKLOAD` only the workload
    WORKLOAD names (its `<axis><value>` such as m8192, its task name or its uuid), and `FILE#all` the shape-general
    `<definition>_all` task over them all."""
    spec, _, chosen = item.strip().partition("#")
    path = Path(spec).expanduser()
    if path.is_dir() and not chosen:
        return [t.name for t in load_dir(path)]
    if not path.is_file():
        raise TaskFileError(path, "(file)", "an existing definition JSON file" + ("" if chosen else " or folder"))
    tasks = load_file(path)
    if not chosen:
        return [t.name for t in tasks]
    if chosen.lower() == "all":
        general = f"{tasks[0].definition}_all"
        if general not in _REGISTRY:
            raise TaskFileError(path, "#all", "a definition with a var axis and two or more workloads (the "
                                "shape-general task is over them)")  # fmt: skip
        return [general]
    picked = [t for t in tasks if chosen in (t.name, t.workload_uuid) or t.name.endswith(f"_{chosen.lower()}")]
    if not picked:
        known = ", ".join(t.name.removeprefix(f"{t.definition}_") for t in tasks)
        raise TaskFileError(path, f"#{chosen}", f"one of its workloads ({known}), a task name or a uuid")
    return [picked[0].name]


def lookup(name: str) -> Task | None:
    """A loaded file task by name; the files in PTXBENCH_TASK_FILES are loaded the first time one is asked for."""
    key = name.strip()
    if key not in _REGISTRY:
        for file in os.environ.get(ENV, "").split(os.pathsep):
            if file and Path(file).resolve() not in _DEFINITIONS and Path(file).is_file():
                load_file(file)
    return _REGISTRY.get(key)


def workloads_of(task: Task) -> list[Workload]:
    """Every workload of a file task's definition, as loaded."""
    definition_of(task)
    return list(_DEFINITIONS[Path(task.source).resolve()][1].values())


def definition_of(task: Task) -> tuple[Definition, Workload | None]:
    """A file task's definition and workload, as loaded."""
    path = Path(task.source).resolve()
    if path not in _DEFINITIONS:
        load_file(path)
    definition, workloads = _DEFINITIONS[path]
    return definition, workloads.get(task.workload_uuid) if task.workload_uuid else None


# --------------------------------------------------------------------------- the reference, in the worker


def _split(name: str) -> tuple[Path, str | None]:
    spec = name.removeprefix(REFERENCE_PREFIX)
    file, _, uuid = spec.partition("#")
    return Path(file), uuid or None


_RUNS: dict[Path, Any] = {}


def run_reference(name: str, tensors: dict, params: dict) -> dict:
    """The definition's own `run` on the inputs in its order (scalars from the workload), its outputs by name in
    fp32; or, for `…#uuid`, the workload's safetensors inputs (a derivation). The code is the user's file, which they
    gave us on the command line: it runs with this process's rights (docs/security.md)."""
    path, uuid = _split(name)
    if uuid is not None:
        return _safetensors_inputs(path, uuid, tensors)
    definition, _ = _DEFINITIONS.get(path.resolve()) or (load_definition(path), None)
    if path not in _RUNS:
        namespace: dict[str, Any] = {"__name__": f"flashinfer_bench_reference_{definition.name}"}
        exec(compile(definition.reference, str(path), "exec"), namespace)  # the user's own file, never a model's text
        _RUNS[path] = namespace["run"]
    args = [tensors[n] if s.shape is not None else params[n] for n, s in definition.inputs.items()]
    out = _RUNS[path](*args)
    outs = out if isinstance(out, tuple | list) else (out,)
    if len(outs) != len(definition.outputs):
        raise ValueError(f"{path}: reference: run returned {len(outs)} value(s), the definition has "
                         f"{len(definition.outputs)} output(s)")  # fmt: skip
    return {n: o.float() for n, o in zip(definition.outputs, outs, strict=True)}


def _safetensors_inputs(path: Path, uuid: str, tensors: dict) -> dict:
    import torch
    from safetensors.torch import load_file as load_tensors  # load_file checked it is installed

    definition, workloads = _DEFINITIONS.get(path.resolve()) or (None, {})
    if definition is None:
        load_file(path)
        definition, workloads = _DEFINITIONS[path.resolve()]
    workload = workloads[uuid]
    root = trace_set_root(path) or path.parent
    # Beside the drawn inputs; with none drawn, where the worker draws (its one GPU), else here.
    device = next(iter(tensors.values())).device if tensors else "cuda" if torch.cuda.is_available() else "cpu"
    out = {}
    for name, spec in workload.inputs.items():
        if isinstance(spec, SafetensorsInput):
            out[name] = load_tensors(str(root / spec.path))[spec.tensor_key].to(device)
    return out
