"""`python -m tasks`: the catalog, one block per task: its canonical name, aliases and former names, dims,
work, baseline, and every input and output tensor with its shape and layout."""

from __future__ import annotations

from tasks.catalog import TARGETS, TASKS
from tasks.expr import evaluate
from tasks.schema import ARCH_ALIASES, Arch, Task


def describe(task: Task) -> list[str]:
    names = ", ".join([*(f"alias {a}" for a in task.aliases), *(f"formerly {f}" for f in task.former_names)])
    seen = f", {task.baseline.h200_ms_seen:g} ms seen on an H200" if task.baseline.h200_ms_seen else ""
    lines = [
        f"{task.name}" + (f"  ({names})" if names else "") + f"  [definition v{task.version}]",
        f"  dims {' '.join(f'{k}={v}' for k, v in task.dims.items())}; "
        f"{evaluate(task.flops, task.dims) / 1e9:,.0f} GFLOP; baseline {task.baseline.library}{seen}",
    ]
    width = max(len(t.name) for t in task.tensors)
    for t in task.tensors:
        init = f", {t.init}" if t.init != "none" else ""
        lines.append(f"  {t.role:<6} {t.name:<{width}} {t.dtype:<8} [{', '.join(t.shape)}]  {t.layout}{init}")
    return lines


def main() -> None:
    for task in TASKS.values():
        print("\n".join(describe(task)) + "\n")
    print("archs and their aliases:")
    for arch in Arch:
        aliases = ", ".join(a for a, v in ARCH_ALIASES.items() if v == arch and a != arch)
        groups = ", ".join(g.name + ("" if g.required else " (optional)") for g in TARGETS[arch])
        print(f"  {arch}: {aliases}; target groups: {groups}")


if __name__ == "__main__":
    main()
