"""`python -m tasks`: the catalog as a table."""

from tasks.catalog import TARGETS, TASKS
from tasks.expr import evaluate
from tasks.schema import ARCH_ALIASES, Arch


def main() -> None:
    rows = [("task", "aliases", "dims", "outputs", "GFLOP", "baseline", "H200 ms seen")]
    for t in TASKS.values():
        rows.append((
            t.name,
            ",".join(t.aliases) or "-",
            " ".join(f"{k}={v}" for k, v in t.dims.items()),
            ",".join(o.name for o in t.outputs),
            f"{evaluate(t.flops, t.dims) / 1e9:,.0f}",
            t.baseline.library,
            f"{t.baseline.h200_ms_seen:.2f}" if t.baseline.h200_ms_seen else "-",
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\narchs and their aliases:")
    for arch in Arch:
        aliases = ", ".join(a for a, v in ARCH_ALIASES.items() if v == arch and a != arch)
        groups = ", ".join(g.name + ("" if g.required else " (optional)") for g in TARGETS[arch])
        print(f"  {arch}: {aliases}; target groups: {groups}")


if __name__ == "__main__":
    main()
