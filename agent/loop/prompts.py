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
from tasks.paper_protocol import ATOL, RTOL, paper_check
from tasks.schema import Arch, Task
from tools.assemble import compile_ptx
from tools.options import Criterion
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


PATTERNS = ("warp_specialization", "persistent_clusters", "attention_pipeline", "backward_dq")
PARTS = ("base", *PATTERNS)
VARIANTS = {"full": PARTS, "base": ("base",), "none": ()}


def parse_prompt(choice: str) -> tuple[str, ...]:
    """The knowledge parts a `prompt=` setting names: full (every part), base, none, or a comma list of parts,
    kept in the packs' own order. ValueError names the unknown ones."""
    if choice.strip() in VARIANTS:
        return VARIANTS[choice.strip()]
    names = {n.strip() for n in choice.split(",") if n.strip()}
    unknown = sorted(names - set(PARTS))
    if unknown or not names:
        raise ValueError(f"unknown knowledge part {', '.join(unknown) or repr(choice)}: give full, base, none, or "
                         f"a comma list of {', '.join(PARTS)}")  # fmt: skip
    return tuple(p for p in PARTS if p in names)


def prompt_name(parts: tuple[str, ...]) -> str:
    """How a run records its knowledge parts: full, base, none, or their comma list."""
    return next((name for name, chosen in VARIANTS.items() if chosen == parts), ",".join(parts))


def knowledge(arch: Arch, parts: tuple[str, ...]) -> str:
    """The chosen parts of the knowledge pack, each its arch-neutral document (prompts/knowledge/PART.md) then its
    arch's own (prompts/knowledge/ARCH/PART.md), whichever exist."""
    tools = toolchain()
    values = {"arch": arch, "gpu": arch.gpu, "sm_count": arch.sm_count,
              "ptxas_version": tools.ptxas_version, "max_ptx_version": tools.max_ptx_version}  # fmt: skip
    texts = []
    for part in parts:
        for name in (f"knowledge/{part}.md", f"knowledge/{arch}/{part}.md"):
            if (PROMPTS_DIR / name).is_file():
                texts.append(render(name, **values).strip())
    return "\n\n".join(texts)


def system_prompt(arch: Arch, parts: tuple[str, ...] = PARTS) -> str:
    pack = knowledge(arch, parts)
    section = f"# {ARCH_NAMES[arch]} ({arch}): what you need to know\n\n{pack}\n" if pack else ""
    return render("system.md", arch=arch, arch_name=ARCH_NAMES[arch], knowledge=section).rstrip() + "\n"


def task_prompt(
    task: Task,
    arch: Arch,
    *,
    trials: int,
    target_speedup: float,
    max_turns: int,
    tools: tuple[int, int] | None = None,
    criterion: Criterion = Criterion.PTXBENCH,
) -> str:
    """The task's text; `tools` (max_tool_calls, max_evaluations) for a tools-mode run, which gets the tools'
    section in place of its turn count; `criterion`: the rule its check applies (eval.criterion), said in words."""
    dims = task.dims
    flops = evaluate(task.flops, dims)
    return render(
        "task.md",
        correctness=correctness(task, trials, criterion),
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
        reference_code=reference_source(task),
        example=render(worked_example(task, arch), sm_count=arch.sm_count).strip(),
        sm_count=arch.sm_count,
        gpu=arch.gpu,
        targets=_targets(task, arch),
        baseline=_baseline(task, arch, flops),
        target_speedup=f"{target_speedup:g}×",
        attempts=f"You have {max_turns} turns." if tools is None else "You have the tools below.",
    ) + ("" if tools is None else "\n\n" + render("tools.md", max_tool_calls=tools[0], max_evaluations=tools[1]))


def correctness(task: Task, trials: int, criterion: Criterion) -> str:
    """How the check judges the outputs, in the words of the task prompt's Correctness section."""
    paper = paper_check(task.family) if criterion is Criterion.PAPER else None
    by_init: dict[str, list[str]] = {}
    for t in task.inputs:
        init = "normal" if paper is not None and t.init == "spiky" and not paper.spikes else t.init
        by_init.setdefault(init, []).append(t.name)
    inputs = "; ".join(f"{', '.join(names)}: {INPUTS[init]}" for init, names in by_init.items())
    poisoned = "Outputs are poisoned before each run, so every element must be written."
    if paper is None:
        return (f"Each output is compared with an fp32 PyTorch reference by its relative L2 error\n‖out − ref‖₂ / "
                f"‖ref‖₂, which must be at most {task.tolerance:g}, on {trials} runs with fresh random inputs\n"
                f"({inputs}). {poisoned}")  # fmt: skip
    library = f"{task.baseline.library}'s output" if task.baseline else "the reference's output"
    share = "every element" if paper.matched >= 1 else f"{paper.matched:.1%} of the elements"
    runs = (
        "fresh random inputs"
        if not paper.stored
        else ("the same stored inputs" if trials <= paper.trials else "the stored inputs first, then fresh random ones")
    )
    return (
        f"Each output is compared element by element with {library} on the same inputs (the PTXBench paper's "
        f"rule): an element fails when |out − expected| > {ATOL:g} and |out − expected| > {RTOL:g}·|expected|, and "
        f"{share} must pass, on {trials} run{'s' if trials != 1 else ''} with {runs} ({inputs}). {poisoned}"
    )


def worked_example(task: Task, arch: Arch) -> str:
    """The worked launch-spec example for the task's family: the arch's own where it has one (a tcgen05 GEMM for
    sm_100a), else the family's; an fp8 family shows its bf16 family's (the launch spec is the same kind)."""
    family = task.family.removeprefix("fp8_")
    own = f"examples/{arch}/{family}.md"
    return own if (PROMPTS_DIR / own).is_file() else f"examples/{family}.md"


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


def _baseline(task: Task, arch: Arch, flops: float) -> str:
    """The baseline, with what is known of its speed on this arch's GPU: seen on our H200, or reported on a B200."""
    b = task.baseline
    if b is None:
        return "none: this task names no library to compare with, so your kernel is timed alone (no speedup)."
    text = f"{b.description}."
    if arch is Arch.SM_90A and b.h200_ms_seen:
        text += f" Seen on an H200: {b.h200_ms_seen:g} ms ({flops / b.h200_ms_seen / 1e9:,.0f} TFLOP/s)."
    if arch is Arch.SM_100A and b.b200_reported:
        text += f" On a B200: {b.b200_reported}."
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
