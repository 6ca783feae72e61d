"""`python -m tasks [GROUP|NAME ...]`: the groups (name, how many tasks, what they are), then one block per task
the arguments name (every task at one workload without arguments; the group `general` names the shape-general
ones): its canonical name, aliases and former names, definition and workload, dims, work, baseline, and every input
and output tensor with its shape and layout; then the archs."""

from __future__ import annotations

import argparse
import signal
import sys

from tasks.catalog import CATALOG_VERSION, GROUP_DESCRIPTIONS, GROUPS, TARGETS, TASKS, get_task, resolve_names
from tasks.expr import evaluate
from tasks.schema import ARCH_ALIASES, Arch, Task, UnknownName


def describe(task: Task) -> list[str]:
    names = ", ".join([*(f"alias {a}" for a in task.aliases), *(f"formerly {f}" for f in task.former_names)])
    library = task.baseline.library if task.baseline else "none"
    seen_ms = task.baseline.h200_ms_seen if task.baseline else None
    seen = f", {seen_ms:g} ms seen on an H200" if seen_ms else ""
    if task.general:
        values = ", ".join(str(t.dims[task.axis]) for t in task.workloads)
        workload = f"{task.definition} at every workload, {task.axis} ∈ {{{values}}} (dims: the largest's)"
    else:
        workload = f"{task.definition} at {task.axis}={task.dims[task.axis]}" if task.axis else task.definition
    lines = [
        f"{task.name}" + (f"  ({names})" if names else "") + f"  [definition v{task.version}]",
        f"  {workload}; dims {' '.join(f'{k}={v}' for k, v in task.dims.items())}; "
        f"{evaluate(task.flops, task.dims) / 1e9:,.0f} GFLOP; baseline {library}{seen}",
    ]
    width = max(len(t.name) for t in task.tensors)
    for t in task.tensors:
        init = f", {t.init}" if t.init != "none" else ""
        lines.append(f"  {t.role:<6} {t.name:<{width}} {t.dtype:<8} [{', '.join(t.shape)}]  {t.layout}{init}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="GROUP|NAME", help=f"groups: {', '.join(GROUPS)}; or task names")
    args = parser.parse_args(argv)
    try:
        names = resolve_names(args.names, files=True) if args.names else list(TASKS)
    except UnknownName as e:
        print(e, file=sys.stderr)
        return 2
    print(f"catalog v{CATALOG_VERSION}; groups:")
    for group, members in GROUPS.items():
        print(f"  {group:<8} {len(members):>3} tasks  {GROUP_DESCRIPTIONS[group]}")
    print()
    for name in names:
        print("\n".join(describe(get_task(name))) + "\n")
    print("archs and their aliases:")
    for arch in Arch:
        aliases = ", ".join(a for a, v in ARCH_ALIASES.items() if v == arch and a != arch)
        groups = ", ".join(g.name + ("" if g.required else " (optional)") for g in TARGETS[arch])
        print(f"  {arch}: {aliases}; target groups: {groups}")
    return 0


if __name__ == "__main__":
    # A listing piped into `head` ends when the reader closes the pipe: exit quietly, as other listing tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
