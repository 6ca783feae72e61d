"""The exported SFT fixtures are what their generator and today's exporter write (python -m
tests.fixtures.sft.make_exported regenerates them)."""

from __future__ import annotations

import filecmp
from pathlib import Path

from tests.fixtures.sft import make_exported


def test_checked_in_exports_are_what_the_generator_writes(tmp_path: Path) -> None:
    make_exported.main(tmp_path)
    for name in ("runs", "exported"):
        fresh, kept = tmp_path / name, make_exported.HERE / name
        files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
        assert sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file()) == files
        _, mismatch, errors = filecmp.cmpfiles(fresh, kept, files, shallow=False)
        assert not mismatch and not errors, "regenerate: python -m tests.fixtures.sft.make_exported"
