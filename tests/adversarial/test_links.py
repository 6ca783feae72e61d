"""Links planted in a run folder or an output folder, as a folder someone sends you may hold them: nothing we
write follows one out of the folder. A resumed run, the inspector and the report refuse on one line naming
the link, and the file it points at is left as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.inspect import main as inspect
from agent.loop.writes import UnsafePath, open_inside, write_inside
from agent.report import main as report
from agent.solve import main as solve
from tests.adversarial.test_run_folders import run

OUTSIDE = "a file outside every folder we write\n"


def outside(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text(OUTSIDE)
    return target


def error_line(capsys: pytest.CaptureFixture) -> str:
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    return line


@pytest.mark.parametrize("planted", ["attempts/turn_02.response.md", "events.log", "summary.json", "attempts"])
def test_a_resumed_run_refuses_a_planted_link(
    planted: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = run(runs_dir, tmp_path, "linked")
    target = outside(tmp_path)
    link = folder / planted
    if link.is_dir():
        os.rename(link, tmp_path / "moved")
        target = target.parent
    elif link.exists():
        link.unlink()
    link.symlink_to(target)
    capsys.readouterr()
    assert solve(["resume=linked", f"runs_dir={runs_dir}", "max_turns=2", "unverified_turns=2"]) == 2
    line = error_line(capsys)
    assert f"{link} is a symbolic link" in line
    assert (tmp_path / "elsewhere" / "precious.txt").read_text() == OUTSIDE
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["precious.txt"]


@pytest.mark.parametrize("planted", ["index.html", "runs"])
def test_the_inspector_does_not_write_through_a_link(
    planted: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run(runs_dir, tmp_path, "one")
    run(runs_dir, tmp_path, "two")  # two runs: an index page and a page per run under runs/
    target = outside(tmp_path)
    site = runs_dir / "site"
    site.mkdir()
    (site / planted).symlink_to(target if planted == "index.html" else target.parent)
    capsys.readouterr()
    assert inspect([str(runs_dir)]) == 2
    assert "symbolic link" in error_line(capsys)
    assert target.read_text() == OUTSIDE
    assert sorted(p.name for p in target.parent.iterdir()) == ["precious.txt"]


@pytest.mark.parametrize("planted", ["report.md", "scores.csv", "status_per_turn.png"])
def test_the_report_does_not_write_through_a_link(
    planted: str, runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run(runs_dir, tmp_path, "one")
    target = outside(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / planted).symlink_to(target)
    capsys.readouterr()
    assert report([str(runs_dir), f"out={out}"]) == 2
    assert f"{out / planted} is a symbolic link" in error_line(capsys)
    assert target.read_text() == OUTSIDE


def test_a_hard_link_or_a_fifo_is_not_written_through(tmp_path: Path) -> None:
    target = outside(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    os.link(target, folder / "hard.txt")
    with pytest.raises(UnsafePath, match="is a hard link"):
        write_inside(folder / "hard.txt", "overwritten")
    assert target.read_text() == OUTSIDE
    os.mkfifo(folder / "pipe")
    with pytest.raises(UnsafePath, match="not a regular file"):  # and no wait for a reader that never comes
        open_inside(folder / "pipe", "a")


def test_a_write_stays_in_its_root_whatever_the_folders_between(tmp_path: Path) -> None:
    target = outside(tmp_path)
    root = tmp_path / "out"
    root.mkdir()
    (root / "runs").symlink_to(target.parent)
    with pytest.raises(UnsafePath, match="leads outside"):
        write_inside(root / "runs" / "precious.txt", "overwritten", root)
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        write_inside(root / "runs", "overwritten", root)
    assert target.read_text() == OUTSIDE
