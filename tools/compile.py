"""`python -m tools.compile FILE --arch ARCH [--task T] [--timeout S] [--json]`: compile a .ptx, a .cu or a
Markdown answer and report resources, diagnostics, SASS and target instructions. Exit 0 compiled (and, with
--task, the launch spec matches the entries), 1 did not compile, the spec does not match, or the input is
unusable; 2 bad usage."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from tasks.catalog import TARGETS, get_task, renamed
from tasks.schema import Arch, UnknownName
from tools import procs, sass
from tools.answer import AnswerError, extract_solution, format_validation_error
from tools.assemble import MAX_SOURCE_BYTES, CompileResult, Diagnostic, render_grouped
from tools.evaluation import StageState
from tools.files import not_a_file, read_capped
from tools.options import EvalOptions
from tools.pipeline import abi_stage, compile_stage, sass_stage
from tools.plan import SpecError, plan_launches


class InputError(Exception):
    """An input file we cannot use; exit 1 with this one line."""


def read_text(path: Path) -> str:
    problem = not_a_file(path)
    if problem:
        raise InputError(f"{path} {problem}")
    size = path.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise InputError(f"{path} is {size / 2**20:.1f} MB; the cap is {MAX_SOURCE_BYTES >> 20} MB")
    data = read_capped(path, MAX_SOURCE_BYTES)  # a file in /proc says 0 bytes and holds more
    if not data:
        raise InputError(f"{path} is empty")
    if len(data) > MAX_SOURCE_BYTES:
        raise InputError(f"{path} is larger than the cap of {MAX_SOURCE_BYTES >> 20} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    if "\0" in text:
        raise InputError(f"{path} holds NUL bytes: it is not source text")
    return text


def kind_of(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".ptx":
        return "ptx"
    if suffix in (".cu", ".cuh"):
        return "cuda"
    if suffix in (".md", ".markdown"):
        return "answer"
    if ".target" in text and ".version" in text:
        return "ptx"
    if "```" in text:
        return "answer"
    raise InputError(f"cannot tell what {path} holds: name it .ptx, .cu or .md")


def build_report(path: Path, arch: Arch, task_name: str | None, timeout_s: float) -> dict:
    """The pipeline's static stages on one file: compile, sass, and (an answer with --task) extract and abi,
    all within `timeout_s`."""
    text = read_text(path)
    kind = kind_of(path, text)
    task = get_task(task_name) if task_name else None
    solution = plan = None
    if kind == "answer":
        try:
            solution = extract_solution(text)
            if task:
                plan = plan_launches(solution.launch, task, arch)
        except (AnswerError, SpecError) as e:
            raise InputError(f"{path}: {e}") from None
        language, source = solution.language, solution.source
    else:
        language, source = kind, text
    budget = procs.Budget(timeout_s)
    _, compiled = compile_stage(language, source, arch, budget.left())
    report = {"file": str(path), "arch": str(arch), "language": language, **_compile_fields(compiled)}
    groups = task.targets[arch] if task else TARGETS[arch]
    if compiled.ok:
        stage = sass_stage(compiled, groups, budget)
        if stage.state is StageState.SKIPPED:
            raise sass.SassError(stage.message)
        if stage.state is StageState.FAILED:
            raise InputError(f"{path}: {stage.message}")
        summaries = {k["name"]: k for k in stage.detail["kernels"]}
        for k in report["kernels"]:
            s = summaries.get(k["name"])
            k["sass"] = {key: v for key, v in s.items() if key != "name"} if s else None
        report["targets"] = stage.detail["targets"]
    else:  # what the PTX names, for a module that did not assemble
        presence = sass.target_presence(groups, compiled.ptx or (source if language == "ptx" else ""), {})
        report["targets"] = {g: p.model_dump() for g, p in presence.items()}
    if solution and task and plan and compiled.ok:
        abi = abi_stage(solution, compiled, task, arch, plan)
        report["abi"] = abi.detail.get("problems", [])
        report["crosschecks"] = abi.detail.get("crosschecks", [])
    return report


def _compile_fields(compiled: CompileResult) -> dict:
    data = compiled.model_dump(mode="json", exclude={"ptx", "log", "arch", "language"})
    return {"ok": compiled.ok, **{k: v for k, v in data.items() if k != "ok"}}


def render(report: dict) -> str:
    out = []
    verdict = "compiled" if report["ok"] else "did NOT compile"
    tools = ", ".join(f"{k} {v}" for k, v in report["toolchain"].items())
    out.append(f"{report['file']} ({report['language']}) → {report['arch']}: {verdict} in "
               f"{report['seconds']:.2f} s [{tools}]")  # fmt: skip
    if report["kernels"]:
        out.append("kernels:")
    for k in report["kernels"]:
        out.append(f"  {k['name']}: {k['registers']} registers, {k['shared_bytes']} B static shared, "
                   f"{k['stack_bytes']} B stack, spills {k['spill_stores']} B stored / {k['spill_loads']} B loaded, "
                   f"{k['barriers']} barriers")  # fmt: skip
        if k.get("sass"):
            top = ", ".join(f"{op} {n}" for op, n in list(k["sass"]["opcodes"].items())[:12])
            out.append(f"    SASS: {k['sass']['instructions']} instructions; {top}")
            if k["sass"]["local_memory"]:
                out.append(f"    local memory traffic: {k['sass']['local_memory']} (spills or run-time-indexed arrays)")
    out.append(f"targets for {report['arch']}:")
    for name, p in report["targets"].items():
        ops = ", ".join(f"{op} ×{n}" for op, n in list(p["sass_matches"].items())[:4])
        out.append(f"  {name:8s} PTX {'yes' if p['ptx'] else 'no ':3s}  SASS {'yes' if p['sass'] else 'no'}"
                   + (f"  ({ops})" if ops else ""))  # fmt: skip
    if report.get("abi") is not None:
        out.append("ABI: " + ("launch spec matches the entries" if not report["abi"] else "MISMATCH"))
        out += [f"  - {p}" for p in report["abi"]]
        out += [f"  cross-check {c['check']} ({c['verdict']}): {c['message']}" for c in report["crosschecks"]]
    if report["diagnostics"]:
        out.append("diagnostics, per kernel as the compilers wrote them (with the usual cause of a slow one):")
        out.append(render_grouped([Diagnostic.model_validate(d) for d in report["diagnostics"]], causes=True))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compile", description=__doc__)
    parser.add_argument("file", type=Path, help="a .ptx, a .cu or a Markdown answer")
    parser.add_argument("--arch", required=True, help="sm_90a or sm_100a (aliases: sm_90, h100, h200, sm_100, b200)")
    parser.add_argument("--task", help="also check an answer's launch spec against this task")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    static_limit = EvalOptions.model_fields["static_timeout_s"]
    parser.add_argument("--timeout", type=float, default=static_limit.default, help=static_limit.description)
    args = parser.parse_args(argv)
    try:
        arch = Arch.resolve(args.arch)
        if args.task:
            get_task(args.task)
        EvalOptions(static_timeout_s=args.timeout)
    except UnknownName as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValidationError as e:
        print(f"error: --timeout: {format_validation_error(e).split(': ', 1)[-1]}", file=sys.stderr)
        return 2
    if args.task and renamed(args.task):
        print(renamed(args.task), file=sys.stderr)
    problem = not_a_file(args.file)
    if problem:
        print(f"error: {args.file} {problem}", file=sys.stderr)
        return 2
    try:
        report = build_report(args.file, arch, args.task, args.timeout)
    except (InputError, sass.SassError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["ok"] and not report.get("abi") else 1


if __name__ == "__main__":
    sys.exit(main())
