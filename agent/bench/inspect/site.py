"""The inspector's site: the run folders at or below a path, read through agent/loop/store.py, written as
static pages with Jinja2 (autoescaped: model output holds '<', '&' and backticks). Every page holds its styles
and its script inline and loads nothing else, so it opens from file:// with no network.

OUT/index.html                  the bench page of the runs (one folder of runs), the run page (PATH is a run
                                folder), or a list of the folders of runs (several)
OUT/benches/<folder>.html       each folder's bench page, when there are several
OUT/runs/<folder>/<run>.html    the run pages

A run folder that cannot be read is listed on its bench page with the reason; the rest of a run that has
an unreadable line or summary is shown, with what could not be read.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined

from agent.bench import plots, score
from agent.bench.inspect.bench_page import Unreadable, bench_page
from agent.bench.inspect.run_page import run_page
from agent.bench.inspect.views import LoadedRun, run_card
from agent.bench.plan import Bench, bench_path
from agent.bench.plan import load as load_bench
from agent.bench.tables import percent, times
from agent.loop.records import RunFilter, Trajectory
from agent.loop.store import RunFolder, error_line, find_runs
from agent.loop.writes import folder_inside, write_inside


@dataclass(frozen=True)
class Site:
    """What build_site wrote, and how long it took: to the index and bench pages, and in all."""

    index: Path
    pages: int
    runs: int
    unreadable: list[Unreadable]
    index_seconds: float
    seconds: float


@dataclass(frozen=True)
class Folder:
    """A folder of runs (a bench, or a runs dir), the name its pages go by, and what could not be read."""

    path: Path
    slug: str
    runs: list[LoadedRun]
    bench: Bench | None
    unreadable: list[Unreadable]


def build_site(path: Path, out: Path, selection: RunFilter | None = None) -> Site:
    """The site of the runs at or below `path` (those `selection` keeps), written to `out`: the index and bench
    pages first, then the run pages."""
    start = time.perf_counter()
    env = _environment()
    out.mkdir(parents=True, exist_ok=True)
    folders = _folders(path, selection or RunFilter())
    if (path / "config.json").is_file() and len(folders) == 1 and len(folders[0].runs) == 1:
        run = folders[0].runs[0]
        _write(out, "index.html", env.get_template("run.html").render(page=run_page(run, run_card(run, ""), None)))
        seconds = time.perf_counter() - start
        return Site(out / "index.html", 1, 1, [], seconds, seconds)
    single = len(folders) == 1
    run_pages, entries = [], []
    for folder in folders:
        page_path = "index.html" if single else f"benches/{folder.slug}.html"
        cards = [run_card(r, f"runs/{folder.slug}/{quote(r.traj.run_id)}.html") for r in folder.runs]
        page = bench_page(folder.slug, str(folder.path), folder.runs, cards, folder.bench, folder.unreadable)
        _write(out, page_path, env.get_template("bench.html").render(page=page, root="" if single else "../"))
        entries.append((page_path, page))
        back = "../../" + page_path
        run_pages += [(folder.slug, run, card, back) for run, card in zip(folder.runs, cards, strict=True)]
    if not single:
        _write(out, "index.html", env.get_template("index.html").render(source=str(path), entries=entries))
    index_seconds = time.perf_counter() - start
    template = env.get_template("run.html")
    for slug, run, card, back in run_pages:
        _write(out, Path("runs") / slug / f"{run.traj.run_id}.html", template.render(page=run_page(run, card, back)))
    pages = len(entries) + (0 if single else 1) + len(run_pages)
    unreadable = [u for _, page in entries for u in page.unreadable]
    return Site(out / "index.html", pages, len(run_pages), unreadable, index_seconds, time.perf_counter() - start)


def _folders(path: Path, selection: RunFilter) -> list[Folder]:
    """The folders holding run folders at or below `path`, each with its runs read (or why not); the runs
    `selection` does not keep are left out (a folder left with none, entirely)."""
    by_parent: dict[Path, list[RunFolder]] = {}
    for folder in find_runs([path]):
        by_parent.setdefault(folder.path.parent, []).append(folder)
    slugs: set[str] = set()
    folders = []
    for parent, members in sorted(by_parent.items()):
        loaded = [r for r in map(load_run, members) if not isinstance(r, LoadedRun) or selection.matches(r.traj.config)]
        if selection and not any(isinstance(r, LoadedRun) for r in loaded):
            continue
        bench, bench_problem = _bench_of(parent)
        folders.append(Folder(
            path=parent,
            slug=_slug(parent, path, slugs),
            runs=[r for r in loaded if isinstance(r, LoadedRun)],
            bench=bench,
            unreadable=[r for r in loaded if isinstance(r, Unreadable)] + bench_problem,
        ))  # fmt: skip
    return folders


def load_run(folder: RunFolder) -> LoadedRun | Unreadable:
    """A run folder's records. Without a readable config.json the run cannot be placed; a line of
    trajectory.jsonl or a summary.json that does not parse is noted, and the rest shown."""
    try:
        config = folder.config()
    except (OSError, ValueError) as e:  # RunFolderError is a ValueError
        return Unreadable(folder.path, _within(folder, e))
    problems: list[str] = []
    try:
        turns = folder.turns(problems)
        steps = folder.steps([])  # a line that is neither is said once, by turns() above
    except (OSError, ValueError) as e:
        turns, steps, problems = [], [], [_within(folder, e)]
    try:
        summary = folder.summary()
    except (OSError, ValueError) as e:
        summary = None
        problems.append(f"{_within(folder, e)} (the summary shown is derived from the turns)")
    traj = Trajectory(run_id=folder.run_id, config=config, turns=turns, summary=summary, steps=steps)
    return LoadedRun(folder.path, traj, tuple(_within(folder, p) for p in problems))


def _within(folder: RunFolder, error: Exception | str) -> str:
    """A reading error as the run's page shows it: its files named within the run folder, which the page names."""
    text = error if isinstance(error, str) else error_line(error)
    return text.replace(f"{folder.path}{os.sep}", "")


def _slug(folder: Path, root: Path, taken: set[str]) -> str:
    """A file name for the folder's pages: its path below `root` (or its name), unique on the site."""
    rel = folder.relative_to(root).as_posix() if folder != root and folder.is_relative_to(root) else folder.name
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", rel).strip("._") or "runs"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug)
    return slug


def _bench_of(folder: Path) -> tuple[Bench | None, list[Unreadable]]:
    """The folder's bench.json, where it has one, or why it does not read."""
    if not bench_path(folder).is_file():
        return None, []
    try:
        return load_bench(folder), []
    except (OSError, ValueError) as e:  # ConfigError and pydantic's are ValueErrors
        return None, [Unreadable(bench_path(folder), error_line(e))]


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("agent.bench.inspect", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(times=times, percent=percent, numbers=_numbers, count=lambda n: f"{n:,}",
                       error_class=score.ERROR_CLASS.__getitem__,
                       label=score.LABELS.__getitem__, lines=lambda n: f"{n:,} line" + ("" if n == 1 else "s"),
                       compact_json=lambda value: json.dumps(value, separators=(", ", ": ")))  # fmt: skip
    env.globals.update(colours=plots.COLORS, fast_p=score.FAST_P, fast1=score.FAST_P.index(1.0),
                       generated=datetime.now(UTC).isoformat(timespec="seconds"))  # fmt: skip
    return env


def _numbers(lines: int) -> str:
    """The line-number gutter of a source of `lines` lines."""
    return "\n".join(map(str, range(1, lines + 1)))


def _write(out: Path, page: Path | str, text: str) -> None:
    """A page of the site, which stays inside `out` whatever links were planted there."""
    path = out / page
    folder_inside(path.parent, out)
    write_inside(path, text, out)


def server(out: Path, port: int) -> http.server.ThreadingHTTPServer:
    """The standard library's file server on 127.0.0.1 for `out` (port 0: any free one); call serve_forever."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
