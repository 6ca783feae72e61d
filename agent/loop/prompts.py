"""The prompts a run starts from: the system prompt (with the arch's knowledge pack) and the task prompt,
rendered from the text templates in prompts/ (`string.Template`: `$name`, `$$` for a dollar sign)."""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

from tasks.expr import PARSE_LOCK, evaluate
from tasks.schema import Arch, Task
from tools.assemble import compile_ptx
from tools.toolchain import ToolNotFound, find_tool

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"
ARCH_NAMES = {Arch.SM_90A: "Hopper", Arch.SM_100A: "Blackwell"}
INPUTS = {
    "normal": "N(0, 1)",
    "spiky": "N(0, 1) + N(0, 100)·Bernoulli(0.001), the paper's outlier-heavy distribution",
    "derived": "computed from the other inputs",
}
_PTX_VERSION = re.compile(r"current version is '([\d.]+)'")


def load(name: str) -> str:
    return (PROMPTS_DIR / name).read_text()


def render(name: str, **values: object) -> str:
    """The template `name` with every `$placeholder` filled; a missing value is a KeyError, not a gap."""
    return Template(load(name)).substitute({k: str(v) for k, v in values.items()})


@dataclass(frozen=True)
class Toolchain:
    ptxas_version: str
    max_ptx_version: str


@cache
def toolchain() -> Toolchain:
    """The assembler's version and the newest PTX ISA it accepts (asked of ptxas itself: it names it
    when refusing an impossible `.version`), so the prompt never promises what ptxas refuses."""
    try:
        version = find_tool("ptxas").version
    except ToolNotFound:
        return Toolchain("(not found)", "(unknown)")
    refused = compile_ptx(".version 99.9\n.target sm_90a\n.address_size 64\n", Arch.SM_90A)
    m = _PTX_VERSION.search(refused.log)
    return Toolchain(version, m.group(1) if m else "(unknown)")


def knowledge(arch: Arch) -> str:
    """What the model needs to know about the arch: the common pack, then the arch's own."""
    tools = toolchain()
    values = {"arch": arch, "ptxas_version": tools.ptxas_version, "max_ptx_version": tools.max_ptx_version}
    return render("arch/common.md", **values).rstrip() + "\n\n" + render(f"arch/{arch}.md", **values).rstrip()


def system_prompt(arch: Arch) -> str:
    return render("system.md", arch=arch, arch_name=ARCH_NAMES[arch], knowledge=knowledge(arch))


def task_prompt(task: Task, arch: Arch, *, trials: int, target_speedup: float, max_turns: int) -> str:
    dims = task.dims
    flops = evaluate(task.flops, dims)
    by_init: dict[str, list[str]] = {}
    for t in task.inputs:
        by_init.setdefault(t.init, []).append(t.name)
    inputs = "; ".join(f"{', '.join(names)}: {INPUTS[init]}" for init, names in by_init.items())
    return render(
        "task.md",
        task_name=task.name,
        arch=arch,
        description=task.description,
        dims=", ".join(f"{k}={v}" for k, v in dims.items()),
        dim_names=", ".join(dims),
        tensor_names=", ".join(t.name for t in task.tensors),
        tensor_table=_tensor_table(task),
        params=_params(task),
        flops=task.flops,
        gflop=f"{flops / 1e9:,.0f}",
        tolerance=f"{task.tolerance:g}",
        trials=trials,
        inputs=inputs,
        reference_code=reference_source(task),
        example=load(f"examples/{task.family}.md").strip(),
        targets=_targets(task, arch),
        baseline=_baseline(task, flops),
        target_speedup=f"{target_speedup:g}×",
        max_turns=max_turns,
    )


def _tensor_table(task: Task) -> str:
    rows = ["| tensor | role | dtype | shape | layout |", "| --- | --- | --- | --- | --- |"]
    for t in task.tensors:
        rows.append(f"| {t.name} | {t.role} | {t.dtype} | [{', '.join(t.shape)}] | {t.layout} |")
    return "\n".join(rows)


def _params(task: Task) -> str:
    if not task.params:
        return ""
    shown = ", ".join(f"{k} = {v:.10g}" if isinstance(v, float) else f"{k} = {v}" for k, v in task.params.items())
    return f"Constants: {shown}.\n"


def _targets(task: Task, arch: Arch) -> str:
    lines = []
    for g in task.targets[arch]:
        need = "required" if g.required else "optional"
        lines.append(f"- `{g.name}` ({need}): {g.description}")
    return "\n".join(lines)


def _baseline(task: Task, flops: float) -> str:
    b = task.baseline
    text = f"{b.description}."
    if b.h200_ms_seen:
        text += f" Seen on an H200: {b.h200_ms_seen:g} ms ({flops / b.h200_ms_seen / 1e9:,.0f} TFLOP/s)."
    return text + " The harness times the baseline on the same GPU as your kernel."


def reference_source(task: Task) -> str:
    """The source of the task's reference (and input derivation) functions, with the module's helpers
    they call, read from tasks/references.py without importing torch."""
    path = Path(importlib.util.find_spec("tasks.references").origin)
    return _functions_source(path.read_text(), tuple(n for n in (task.derive, task.reference) if n))


@cache
def _functions_source(text: str, names: tuple[str, ...]) -> str:
    with PARSE_LOCK:  # see tasks/expr.py: bench threads render prompts at once
        tree = ast.parse(text)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    wanted: list[str] = []

    def visit(name: str) -> None:
        if name in wanted or name not in functions:
            return
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Name) and node.id in functions:
                visit(node.id)
        wanted.append(name)

    for name in names:
        visit(name)
    return "\n\n\n".join(ast.get_source_segment(text, functions[n]) for n in wanted)
