"""The report's plots, with matplotlib (an optional dependency: `pip install .[report]`): PNG files for the
Markdown report, SVG text for the inspector's pages. Without matplotlib, `draw` and `svgs` say why and the
callers keep their tables."""

from __future__ import annotations

import io
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from agent.bench import score
from agent.loop.records import Trajectory
from agent.loop.writes import open_inside
from tools.extras import pip_command

# Colours that say what they mean: green passed; amber unverified (not known: no GPU of the arch decided it);
# every failure a red, the deepest for the one that got furthest (a wrong result), paler for earlier stages.
COLORS = {
    "passed": "#2ca02c", "unverified": "#f2c14e", "mismatch": "#c62828", "timeout": "#e0533a",
    "runtime": "#ec7a5c", "abi": "#f29e80", "compile": "#f6bfae", "format": "#b98b82", score.NOT_REACHED: "#e5e5e5",
}  # fmt: skip
# Task and model names come from run folders: drawn as typed, never read as mathtext ('$…$').
RC = {"text.parse_math": False, "svg.fonttype": "path"}
# What an SVG file has before its <svg> element, and the namespace declarations inline SVG does without.
_SVG_PREAMBLE = re.compile(r"^.*?(?=<svg\b)", re.S)
_SVG_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
SVG_METADATA = ("Creator", "Date", "Format", "Type")  # what matplotlib writes by default; None leaves each out


def draw(trajs: list[Trajectory], out: Path) -> tuple[dict[str, str], str | None]:
    """{plot name: file name} of the PNG plots written to `out`, and why none were, if so."""

    def save(name: str, fig) -> str:
        with open_inside(out / f"{name}.png", "wb") as f:
            fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
        return f"{name}.png"

    return _render(trajs, save)


def svgs(trajs: list[Trajectory]) -> tuple[dict[str, str], str | None]:
    """{plot name: SVG markup to place inside an HTML page} (text drawn as paths, no fonts, no links), and
    why none were drawn, if so."""

    def markup(name: str, fig) -> str:
        import matplotlib

        buf = io.StringIO()
        # A salt per plot keeps the element ids of several plots on one page apart.
        with matplotlib.rc_context({"svg.hashsalt": name}):
            fig.savefig(buf, format="svg", bbox_inches="tight", metadata={k: None for k in SVG_METADATA})
        return _SVG_NAMESPACES.sub("", _SVG_PREAMBLE.sub("", buf.getvalue(), count=1), count=2)

    return _render(trajs, markup)


def unavailable() -> str | None:
    """Why no plot can be drawn here, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"matplotlib is not installed ({pip_command('report')})"
    return None


def _render(trajs: list[Trajectory], keep: Callable[[str, object], str]) -> tuple[dict[str, str], str | None]:
    why = unavailable()
    if why:
        return {}, why
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    kept = {}
    with matplotlib.rc_context(RC):
        for name, fig in _figures(plt, trajs):
            fig.tight_layout()
            kept[name] = keep(name, fig)
            plt.close(fig)
    return kept, None


def _figures(plt, trajs: list[Trajectory]) -> Iterator[tuple[str, object]]:
    for name, plot in (
        ("success_vs_budget", success_vs_budget),
        ("speedup_by_task", speedup_by_task),
        ("status_per_turn", status_per_turn),
    ):
        fig = plot(plt, trajs)
        if fig is not None:
            yield name, fig


def _grid(plt, count: int, width: float = 5.0, height: float = 3.6):
    cols = min(count, 3)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


BUDGET_SERIES = (  # field, label, style: a marker of its own each, so curves that coincide stay readable
    ("pass_at_k", "single-shot pass@k", "o-C0"),
    ("repair_at_k", "repair: correct ≤ k turns", "s-C1"),
    ("fast1_pass_at_k", "single-shot fast_1@k", "^--C2"),
    ("fast1_repair_at_k", "repair: fast_1 ≤ k turns", "v--C3"),
)
DODGE = 0.07  # the series drawn this far apart along k, so equal curves lie side by side, not on top


def success_vs_budget(plt, trajs: list[Trajectory]):
    """pass@k of single-shot samples against repair within k turns, per model × arch (over all tasks); curves with
    the same values are drawn a little apart and named in a note."""
    curves: dict[tuple[str, str], list[score.BudgetPoint]] = defaultdict(list)
    for p in score.single_vs_multi(trajs):
        if score.pooled(p.group.task) and not score.pooled(p.group.arch):
            curves[(p.group.model, p.group.arch)].append(p)
    if not curves:
        return None
    fig, axes = _grid(plt, len(curves))
    for ax, ((model, arch), points) in zip(axes, sorted(curves.items()), strict=False):
        drawn: dict[tuple, list[str]] = defaultdict(list)
        for i, (field, label, style) in enumerate(BUDGET_SERIES):
            xy = tuple((p.k, getattr(p, field)) for p in points if getattr(p, field) is not None)
            if xy:
                shift = (i - (len(BUDGET_SERIES) - 1) / 2) * DODGE
                ax.plot([k + shift for k, _ in xy], [v for _, v in xy], style, label=label, markersize=4)
                drawn[xy].append(label)
        same = [labels for labels in drawn.values() if len(labels) > 1]
        if same:
            note = "; ".join(" = ".join(labels) for labels in same)
            ax.text(0.02, 0.98, f"same values: {note}", transform=ax.transAxes, fontsize=7, va="top", wrap=True)
        ax.set(title=f"{model} · {arch}", xlabel="attempts k", ylabel="share of problems", ylim=(-0.03, 1.03))
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Success at equal attempt budgets: k samples vs k turns of repair")
    return fig


def speedup_by_task(plt, trajs: list[Trajectory]):
    """Best speedup of each correct trajectory (its last turn limit), per task, one series per model × mode."""
    by_arch: dict[str, dict[tuple[str, str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        row = score.trajectory_row(t)
        if row["best_speedup"] is not None:
            by_arch[row["arch"]][(row["task"], row["model"], row["mode"])].append(row["best_speedup"])
    if not by_arch:
        return None
    fig, axes = _grid(plt, len(by_arch), width=7.0)
    jitter = random.Random(0)  # the same report twice draws the same points
    for ax, (arch, groups) in zip(axes, sorted(by_arch.items()), strict=False):
        tasks = sorted({task for task, _, _ in groups})
        series = sorted({(model, mode) for _, model, mode in groups})
        width = 0.8 / len(series)
        for j, (model, mode) in enumerate(series):
            positions, data = [], []
            for i, task in enumerate(tasks):
                if (task, model, mode) in groups:
                    positions.append(i - 0.4 + width * (j + 0.5))
                    data.append(groups[(task, model, mode)])
            box = ax.boxplot(
                data,
                positions=positions,
                widths=width * 0.8,
                patch_artist=True,
                showfliers=False,  # every point is drawn over the box
                medianprops={"color": "k"},
            )
            for patch in box["boxes"]:
                patch.set(facecolor=f"C{j}", alpha=0.35)
            for x, values in zip(positions, data, strict=True):
                xs = [x + jitter.uniform(-width * 0.25, width * 0.25) for _ in values]
                ax.scatter(xs, values, s=12, color=f"C{j}", zorder=3)
            ax.plot([], [], "s", color=f"C{j}", label=f"{model} · {mode}")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.yaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
        ax.set(title=arch, ylabel="best speedup vs baseline (log)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Speedup of correct trajectories per task (dashed: the frontier library)")
    return fig


def status_per_turn(plt, trajs: list[Trajectory]):
    """Error classes of the attempts at each turn, per model × mode (over all tasks and archs)."""
    bars = [s for s in score.status_per_turn(trajs) if score.pooled(s.group.task) and score.pooled(s.group.arch)]
    panels: dict[tuple[str, str], list[score.TurnStatus]] = defaultdict(list)
    for s in bars:
        panels[(s.group.model, s.group.mode)].append(s)
    if not panels:
        return None
    fig, axes = _grid(plt, len(panels))
    for ax, ((model, mode), turns) in zip(axes, sorted(panels.items()), strict=False):
        x = [s.turn for s in turns]
        bottom = [0] * len(turns)
        for cls in (*score.CLASSES, score.NOT_REACHED):
            heights = [s.counts.get(cls, 0) for s in turns]
            if any(heights):
                ax.bar(x, heights, bottom=bottom, color=COLORS[cls], label=score.LABELS[cls])
                bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set(title=f"{model} · {mode}", xlabel="turn", ylabel="trajectories")
        ax.set_xticks(x)
        ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Status per turn")
    return fig
