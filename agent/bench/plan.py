"""What a benchmark runs, fixed in its folder's bench.json: the settings, and every trajectory with its run
id, in a deterministic order, so that the same command (or resume=BENCH_ID) continues the same bench.

runs/<bench_id>/
  bench.json   format version, settings, preset, planned trajectories (task × arch × mode × variant × sample), resumes
  <run_id>/    one agent.solve run folder per trajectory: f"{task}-{arch}-{mode}-s{sample:02d}", or under a preset's
               prompt variants f"{task}-{arch}-{mode}-{variant}-s{sample:02d}"
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agent.bench.presets import Preset, variants
from agent.cli import ConfigError
from agent.loop.command_line import solve_settings
from agent.loop.config import ENDPOINT_KEYS, SolveConfig
from agent.loop.redact import redact
from agent.loop.store import RunFolder, check_run_id
from agent.loop.writes import write_inside
from tasks.catalog import get_task, resolve_names
from tasks.schema import Arch, UnknownName
from tools.answer import format_validation_error
from tools.options import Profile

BENCH_FORMAT = 1
MODES = ("single", "multi", "tools")
Mode = Literal["single", "multi", "tools"]
DEFAULT_MODES = ("single", "multi")  # tools is asked for by name: not every endpoint serves function calls
# Settings a mode changes unless the bench sets them: the perf pass feeds the next turn, which a single-shot
# sample does not have. A tools run (mode=tools) gets as many GPU evaluations as a repair run has turns, so the
# three compare at equal evaluations (run_settings).
MODE_DEFAULTS: dict[str, dict[str, Any]] = {"single": {"eval.profile": Profile.COUNTS}, "multi": {}, "tools": {}}
MAX_RUNS = 100_000  # a plan is built whole and kept in bench.json: 10^8 samples would take gigabytes
# Settings agent.bench sets for each run itself, or that a bench cannot share across runs.
RESERVED = {
    "task": "use tasks=",
    "arch": "use archs=",
    "run_id": "run ids are task-arch-mode-sample (task-arch-mode-variant-sample under a preset)",
    "mode": "use modes=single,multi,tools",
    "eval.device": "a bench uses every visible GPU; choose them with CUDA_VISIBLE_DEVICES",
}


class PlannedRun(BaseModel):
    """One trajectory of the bench."""

    run_id: str
    task: str
    arch: str
    mode: Mode
    sample: int = Field(description="0-based sample number within task × arch × mode × variant.")
    max_turns: int
    variant: str | None = Field(None, description="The preset's prompt variant this run is a trajectory of.")
    prompt: str | None = Field(None, description="The knowledge parts that variant sets (agent.solve's prompt=).")


class Bench(BaseModel):
    """bench.json."""

    format_version: int = BENCH_FORMAT
    bench_id: str
    created_at: str
    tasks: list[str] = Field(description="Task names (aliases and groups resolved).")
    archs: list[str]
    samples: int = Field(ge=1, description="Trajectories per task × arch × mode (× prompt variant, under a preset).")
    max_turns: int = Field(ge=1, description="Turns of a multi-turn trajectory (a single-shot one has 1).")
    modes: list[Mode]
    solve: dict[str, str] = Field(
        description="agent.solve settings every run shares, as given (key=value), the preset's among them."
    )
    preset: str | None = Field(None, description="The preset the bench was planned with (agent/bench/presets.py).")
    preset_settings: dict[str, str] = Field(
        default_factory=dict, description="The settings the preset gave that the command line did not override."
    )
    runs: list[PlannedRun]
    resumed: list[dict[str, Any]] = Field(default_factory=list, description="When continued, and what changed.")

    def identity(self) -> dict[str, Any]:
        """What makes two benches the same experiment (the endpoint may move)."""
        solve = {k: v for k, v in self.solve.items() if k not in ENDPOINT_KEYS}
        return {"tasks": self.tasks, "archs": self.archs, "samples": self.samples, "max_turns": self.max_turns,
                "modes": self.modes, "solve": solve, "preset": self.preset,
                "configurations": sorted({(r.task, r.variant or "", r.prompt or "") for r in self.runs})}  # fmt: skip


# task, arch, mode, variant: what the settings of a bench's runs differ by, beside their ids
Shared = tuple[str, str, str, str | None]


def shared(run: PlannedRun) -> Shared:
    return run.task, run.arch, run.mode, run.variant


def run_settings(bench: Bench) -> dict[Shared, SolveConfig]:
    """The settings of the bench's runs by task, arch, mode and variant (a run adds its id and folder), read once:
    the bench's agent.solve settings over the mode's defaults, the variant's prompt, the endpoint from the environment
    or ./ptxbench.toml where they name none; ConfigError for a setting that is unknown or invalid."""
    settings = {}
    for run in {shared(r): r for r in bench.runs}.values():
        fixed = {"task": run.task, "arch": run.arch, "max_turns": turns(run.mode, bench.max_turns)}
        if run.prompt is not None:
            fixed["prompt"] = run.prompt
        if run.mode == "tools":
            fixed["mode"] = "tools"
            base = {"max_evaluations": str(bench.max_turns), **MODE_DEFAULTS[run.mode]}
        else:
            base = MODE_DEFAULTS[run.mode]
        settings[shared(run)] = solve_settings({**base, **bench.solve, **fixed})
    return settings


def turns(mode: str, max_turns: int) -> int:
    """A run's turn limit: one for a single-shot sample, the bench's max_turns for a repair trajectory."""
    return 1 if mode == "single" else max_turns


def resolve_tasks(value: str) -> list[str]:
    """Comma-separated groups (`python -m tasks` lists them: core, paper, gemm, mha_fwd, …, all), names and
    aliases, in order, without repeats."""
    try:
        return resolve_names(_items(value, "tasks"))
    except UnknownName as e:
        raise ConfigError(str(e)) from None


def resolve_archs(value: str) -> list[str]:
    archs: list[str] = []
    for item in _items(value, "archs"):
        try:
            archs += [str(a) for a in Arch] if item.lower() == "all" else [str(Arch.resolve(item))]
        except UnknownName as e:
            raise ConfigError(str(e)) from None
    return list(dict.fromkeys(archs))


def _items(value: str, key: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ConfigError(f"{key}= is empty")
    return items


def plan(
    bench_id: str, tasks: list[str], archs: list[str], samples: int, max_turns: int, modes: list[str], solve: dict,
    preset: Preset | None = None, preset_settings: dict[str, str] | None = None,
) -> Bench:  # fmt: skip
    """The bench and its runs, in the order they are started: task, arch, mode, variant, sample. Under a preset each
    task runs its family's prompt variants, unless `solve` names a prompt (then that one, as without a preset)."""
    bad_modes = [m for m in modes if m not in MODES]
    if bad_modes or not modes:
        raise ConfigError(f"unknown mode {', '.join(bad_modes) or '(none)'}; modes are {', '.join(MODES)}")
    if "multi" in modes and max_turns < 2:
        raise ConfigError("mode multi needs max_turns ≥ 2 (a one-turn run is a single-shot sample)")
    for key, why in RESERVED.items():
        if key in solve:
            raise ConfigError(f"{key} cannot be set for a bench: {why}")
    configs = {task: _configurations(task, preset, solve) for task in tasks}
    planned = sum(map(len, configs.values())) * len(archs) * len(modes) * samples
    if planned > MAX_RUNS:
        raise ConfigError(
            f"the bench would plan {planned:,} runs ({sum(map(len, configs.values()))} task configurations × "
            f"{len(archs)} archs × {len(modes)} modes × {samples:,} samples); at most {MAX_RUNS:,}: lower samples="
        )
    runs = [
        PlannedRun(
            run_id=check_run_id("-".join([task, arch, mode, *([variant] if variant else []), f"s{sample:02d}"])),
            task=task,
            arch=arch,
            mode=mode,
            sample=sample,
            max_turns=turns(mode, max_turns),
            variant=variant,
            prompt=prompt,
        )
        for task in tasks
        for arch in archs
        for mode in modes
        for variant, prompt in configs[task]
        for sample in range(samples)
    ]
    try:
        return Bench(bench_id=check_run_id(bench_id, "bench_id"), created_at=_now(), tasks=tasks, archs=archs,
                     samples=samples, max_turns=max_turns, modes=modes, solve=solve,
                     preset=preset.name if preset else None, preset_settings=preset_settings or {},
                     runs=runs)  # fmt: skip
    except ValidationError as e:
        raise ConfigError("invalid bench settings:\n" + format_validation_error(e)) from None


def _configurations(task: str, preset: Preset | None, solve: dict) -> list[tuple[str | None, str | None]]:
    """A task's (variant, prompt) configurations: the preset's variants for its family, or one, unnamed."""
    if preset is None or "prompt" in solve:
        return [(None, None)]
    return [(v.name, v.prompt) for v in variants(preset, get_task(task))]


def new_bench_id() -> str:
    return f"bench-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def bench_path(bench_dir: Path) -> Path:
    return bench_dir / "bench.json"


def load(bench_dir: Path) -> Bench:
    path = bench_path(bench_dir)
    if not path.is_file():
        raise ConfigError(f"{bench_dir} is not a bench folder (no bench.json)")
    data = json.loads(path.read_text())
    if data.get("format_version") != BENCH_FORMAT:
        raise ConfigError(f"{path}: format version {data.get('format_version')}, this code reads {BENCH_FORMAT}")
    return Bench.model_validate(data)


def save(bench: Bench, bench_dir: Path) -> None:
    bench_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(redact(bench.model_dump(mode="json")), indent=2)  # an endpoint's credentials stay out
    write_inside(bench_path(bench_dir), text, atomic=True)


def continue_with(saved: Bench, endpoint: dict[str, str]) -> Bench:
    """The saved bench with new endpoint settings, the change recorded."""
    changed = {k: v for k, v in endpoint.items() if saved.solve.get(k) != v}
    if not changed:
        return saved
    resumed = [*saved.resumed, {"at": _now(), "changed": changed}]
    return saved.model_copy(update={"solve": {**saved.solve, **changed}, "resumed": resumed})


def differences(saved: Bench, wanted: Bench) -> list[str]:
    a, b = saved.identity(), wanted.identity()
    return [f"{k}: {a[k]} (saved) vs {b[k]} (now)" for k in a if a[k] != b[k]]


RunState = Literal["new", "finished", "resume"]


def run_state(bench_dir: Path, run: PlannedRun) -> RunState:
    """'finished': ended by a stopping rule (skipped); 'resume': killed or stopped on an error, and
    resumable from its checkpoint; 'new': not started, or killed before its first checkpoint."""
    path = bench_dir / run.run_id
    if not (path / "config.json").is_file():
        return "new"
    summary = RunFolder(path).summary()
    if summary is not None and summary.finished:
        return "finished"
    return "resume" if RunFolder(path).checkpoints_path.is_file() else "new"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
