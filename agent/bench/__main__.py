"""`python -m agent.bench tasks=… archs=… [preset=paper] [llm=…] [samples=K] [max_turns=T] [modes=single,multi,tools]
[concurrency=N] [dry_run=true] [key=value …]`: many repair-loop runs at once, each a normal run folder under one
bench folder, then a score table; `resume=BENCH_ID` (or the same command with the same bench_id) continues one.
The planned runs and their most GPU evaluations are printed first; dry_run=true stops there, writing nothing.
Exit status: 0 every run finished (whatever the models achieved); 1 some stopped on an error (continue
with resume=BENCH_ID); 2 usage or configuration error; 130 interrupted.
"""

from __future__ import annotations

import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.bench"):
    from agent.bench.plan import DEFAULT_MODES, RESERVED, save
    from agent.bench.presets import PRESETS
    from agent.bench.run import DEFAULTS, check_runs, configure, planned_evaluations, run_bench
    from agent.loop.config import ENDPOINT_KEYS, setting_default


def usage() -> str:
    return "\n".join(
        [
            "usage: python -m agent.bench tasks=T,… archs=A,… [preset=P] [llm=…] [samples=K] [max_turns=T] [modes=M,…]",
            "                             [concurrency=N] [runs_dir=DIR] [bench_id=ID] [dry_run=true]",
            "                             [agent.solve key=value …]",
            "       python -m agent.bench resume=BENCH_ID [runs_dir=DIR] [concurrency=N] [llm.base_url=… …]",
            "",
            "  tasks        names, aliases or groups (python -m tasks lists them): core, general (the _all tasks), all",
            "  archs        sm_90a, sm_100a or aliases (h100, b200, …), or all",
            f"  samples      trajectories per task × arch × mode [{DEFAULTS['samples']}]",
            f"  max_turns    turns of a multi-turn (repair) trajectory [{DEFAULTS['max_turns']}]",
            f"  modes        single (max_turns=1 samples), multi (max_turns=T repair), tools (the model calls the "
            f"harness's tools until it submits, max_evaluations=T) [{','.join(DEFAULT_MODES)}]",
            f"  concurrency  runs at once (model calls overlap, GPU stages queue) [{DEFAULTS['concurrency']}]",
            f"  runs_dir     where the bench folder goes [{setting_default('runs_dir')}]",
            "  bench_id     the bench folder's name [bench-<time>-<random>]; the same command and bench_id continue it",
            "  preset       a protocol in one word; its settings sit under the command line's (prompt= replaces its "
            "variants):",
            *(
                f"               {p.name}: {p.about}; sets {' '.join(f'{k}={v}' for k, v in p.settings.items())}"
                for p in PRESETS.values()
            ),
            "  dry_run      true: print the planned runs and GPU evaluations, check every run's settings, write "
            "nothing",
            "",
            "Every other key=value is an agent.solve setting shared by all runs (python -m agent.solve help),",
            "except these, which a bench sets itself:",
            *(f"  {key:<12} {why}" for key, why in RESERVED.items()),
            "A continued bench may change only concurrency, runs_dir and " + ", ".join(ENDPOINT_KEYS) + ".",
            "Exit status: 0 every run finished; 1 some stopped on an error (continue with resume=BENCH_ID);",
            "2 usage or configuration error; 130 interrupted.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _bench, argv)


def _bench(argv: list[str]) -> int:
    if not argv:
        raise cli.ConfigError("tasks= and archs= required, e.g. tasks=core archs=sm_90a llm=reference")
    pairs = cli.parse_pairs(argv)
    dry_run = pairs.pop("dry_run", "false")
    if dry_run not in ("true", "false"):
        raise cli.ConfigError(f"dry_run must be true or false (got {dry_run!r})")
    ready = configure(pairs)
    print(planned_evaluations(ready, check_runs(ready)), file=sys.stderr)
    if dry_run == "true":
        return 0
    with cli.writing("runs_dir", ready.folder):
        save(ready.bench, ready.folder)
    return run_bench(ready)


if __name__ == "__main__":
    sys.exit(main())
