"""OUT/train.json's model (agent/sft/train_record.py): a record written by format 1's first writer (a dict, before
the model) still loads, one written before the first step too, and one that does not read says where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.sft.train_record import FORMAT_VERSION, TrainRecord

OLD = Path(__file__).parents[2] / "fixtures" / "sft" / "train_v1.json"


def written(tmp_path: Path, record: dict) -> Path:
    (tmp_path / "train.json").write_text(json.dumps(record))
    return tmp_path


def test_a_record_of_the_untyped_writer_loads_whole(tmp_path: Path) -> None:
    old = json.loads(OLD.read_text())
    record = TrainRecord.load(written(tmp_path, old))
    assert record.format_version == 1 == FORMAT_VERSION and record.status == "done"
    assert record.result.steps == 1 and record.result.eval_loss == old["result"]["eval_loss"]
    assert record.trained_on.by_error_class == {"compile_error": 1, "mismatch": 1, "timeout": 1}
    assert record.evaluated_on.examples == 1 and record.outputs.merged is None
    assert record.model_dump(mode="json") == old  # nothing read is lost or added


def test_a_record_of_a_run_that_died_before_its_end_loads(tmp_path: Path) -> None:
    old = json.loads(OLD.read_text())
    started = {k: v for k, v in old.items() if k not in ("finished_at", "result", "outputs")} | {"status": "training"}
    record = TrainRecord.load(written(tmp_path, started))
    assert record.status == "training" and record.result is None and record.outputs is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": FORMAT_VERSION + 1}, f"format_version: Value error, format {FORMAT_VERSION + 1} is newer"),
        ({"status": "halfway"}, "status: Input should be 'training' or 'done'"),
        ({"trained_on": {"examples": 3}}, "trained_on.by_format: Field required"),
    ],
)
def test_a_record_that_does_not_read_names_the_field(tmp_path: Path, change: dict, message: str) -> None:
    folder = written(tmp_path, json.loads(OLD.read_text()) | change)
    with pytest.raises(ValueError, match="^" + str(folder / "train.json").replace(".", r"\.")) as caught:
        TrainRecord.load(folder)
    assert message in str(caught.value) and "\n" not in str(caught.value)
