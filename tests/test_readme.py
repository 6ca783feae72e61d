"""README's two commands are the contract with a fresh machine: CI must run the test command word for word. Every
command README and docs/ show works: each `python -m MODULE` in a code block prints its help, each one that needs
no model, no GPU and no folder of the reader's runs as shown, and every relative link points at what exists."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.+?)\n```", section)


def test_readme_has_a_main_command_and_a_test_command():
    main, tests = readme_commands()
    assert "python -m agent.solve" in main and "llm=reference" in main
    assert "pytest" in tests and "ruff check" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def split_page(page: Path) -> tuple[list[str], list[str]]:
    """A Markdown page's fenced code lines (a line ending in `\\` joined with the next) and its other lines."""
    inside, code, prose = False, [], []
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and code and code[-1].endswith("\\"):
            code[-1] = code[-1][:-1].rstrip() + " " + line.strip()
        else:
            (code if inside else prose).append(line)
    return code, prose


def documented_modules() -> list[str]:
    """Every `python -m MODULE` a code block of README or a docs/ page shows."""
    code = "\n".join(line for page in PAGES for line in split_page(page)[0])
    return sorted(set(re.findall(r"python3? -m ([\w.]+)", code)) - {"venv", "pip"})


def test_every_command_readme_shows_prints_its_help():
    modules = documented_modules()
    assert {"agent.solve", "agent.bench", "agent.report", "agent.replay", "agent.export_sft"} <= set(modules)
    harness = {
        "tools.compile",
        "tools.evaluate",
        "tools.serve",
        "tools.mcp",
        "tools.gpu.dask_scheduler",
        "tools.gpu.dask_worker",
    }
    assert harness | {"tasks", "agent.rl_prompts", "agent.train_sft"} <= set(modules)

    def run(module: str, word: str) -> tuple[str, str, subprocess.CompletedProcess]:
        done = subprocess.run([sys.executable, "-m", module, word], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)  # fmt: skip
        return module, word, done

    words = {m: ["--help", "help"] if m.startswith("agent.") else ["--help"] for m in modules}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda mw: run(*mw), [(m, w) for m, ws in words.items() for w in ws]))
    for module, word, done in results:
        assert done.returncode == 0, f"python -m {module} {word}: {done.stderr[-500:]}"
        assert "usage" in done.stdout.lower() and "Traceback" not in done.stderr, f"{module} {word}"


# ------------------------------------------------------------------------------------ commands that run offline

SERVERS = {"tools.serve", "tools.mcp", "tools.gpu.dask_scheduler", "tools.gpu.dask_worker"}  # they run until stopped
# A fine-tune of a real model: its weights, and a GPU. (Its CPU test trains a tiny one: tests/agent/sft.)
NOT_OFFLINE = SERVERS | {"agent.train_sft"}
# What the reader fills in: a word in capitals (M, RUN_ID, ANSWER.md, runs/BENCH_ID), optional or alternative
# parts ([…], a|b, …), and shell operators, which say the line is not one command.
FILL_IN = re.compile(r"(?<![\w.])[A-Z][A-Z0-9_]*(?!\w)|[\[\]|…&;<>]")


def offline_commands(page: Path) -> list[list[str]]:
    """The commands of a page's code blocks that run as shown: `python -m` lines with nothing to fill in that
    start no server and call no model."""
    commands = []
    for line in split_page(page)[0]:
        words = shlex.split(line, comments=True)
        if words[:2] != ["python", "-m"] or words[2] in NOT_OFFLINE or "llm=openai" in words:
            continue
        if not FILL_IN.search(" ".join(words)) and words[3:] not in (["help"], ["--help"]):  # help: tested above
            commands.append(words)
    return commands


def run_page(page: Path, folder: Path) -> tuple[Path, Path, list[tuple[list[str], subprocess.CompletedProcess]]]:
    """Run a page's offline commands in order, as its reader would, in a fresh folder: what they write stays
    there, and the repository's files they name (fixtures, reference answers) are linked in."""
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    results = []
    for words in offline_commands(page):
        for word in words[3:]:
            named = Path(word.split("=", 1)[-1])  # a path, or a setting's value (llm.path=FILE)
            top = named.parts[0] if named.parts and not named.is_absolute() else None
            if top and (ROOT / named).is_file() and not (folder / top).exists():
                (folder / top).symlink_to(ROOT / top)
        done = subprocess.run([sys.executable, *words[1:]], capture_output=True, text=True, timeout=300, cwd=folder,
                              env=env)  # fmt: skip
        results.append((words, done))
        if done.returncode != 0:
            break
    return page, folder, results


def test_every_offline_command_readme_and_docs_show_runs(tmp_path: Path):
    pages = [page for page in PAGES if offline_commands(page)]
    with ThreadPoolExecutor(3) as pool:
        ran = list(pool.map(lambda page: run_page(page, tmp_path / page.stem), pages))
    modules = set()
    for page, _, results in ran:
        for words, done in results:
            assert done.returncode == 0 and "Traceback" not in done.stderr, (
                f"{page.name}: {shlex.join(words)}: {done.stderr[-800:]}"
            )
            modules.add(words[2])
    assert {"tasks", "tools.evaluate", "agent.solve", "agent.bench", "agent.report", "agent.replay", "agent.inspect",
            "agent.export_sft", "agent.rl_prompts", "agent.graph"} <= modules  # fmt: skip
    readme_folder = next(folder for page, folder, _ in ran if page.name == "README.md")
    # What README says the try bench leads to: its report, its site and an SFT file with its data card.
    for written in ("runs/try/report/report.md", "runs/try/site/index.html", "data/fixit.jsonl", "data/fixit.card.md"):
        assert (readme_folder / written).is_file(), written


# ------------------------------------------------------------------------------------ links


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in split_page(page)[1] if re.match(r"#{1,6} ", line)}


def test_every_relative_link_in_readme_and_docs_points_at_what_exists():
    checked = 0
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(split_page(page)[1])):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.relative_to(ROOT)}: {target}: no such file"
            if fragment:
                assert linked.suffix == ".md" and fragment in anchors(linked), f"{page.relative_to(ROOT)}: {target}"
            checked += 1
    assert checked >= 20


def test_every_docs_page_is_in_the_index_and_the_index_in_readme():
    index = (ROOT / "docs" / "README.md").read_text()
    pages = {p.name for p in PAGES if p.parent.name == "docs"} - {"README.md"}
    assert {"harness.md", "answers.md", "loop.md", "bench.md", "service.md", "training.md", "rl.md", "pool.md",
            "security.md", "performance.md"} <= pages  # fmt: skip
    assert {p for p in pages if f"]({p})" not in index} == set()
    assert "](docs/README.md)" in (ROOT / "README.md").read_text()
