"""OUT/eval_results.jsonl stays in step order when the newest checkpoint is lost: --mode evaluate
of the older one inserts its record in place, and a training run resuming from it sets aside
the records (and the best export) of the lost steps, then evaluates those steps again.

On a copy of the session's finished run (tests/trainer/conftest.py tiny_run_of), in this process.

    .venv/bin/python -m pytest tests/trainer/test_eval_record_order.py
"""
import glob
import json
import logging
import shutil

import pytest
import tensorflow as tf

from common import signature
from tests.engines import needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer import task
from trainer.run import eval_records


def lose_newest_checkpoint(out, moved_to):
    """Checkpoint 4 moved out of the run (the fix checkpoints.py names for a damaged one), the
    state naming checkpoint 2."""
    moved_to.mkdir()
    for path in glob.glob(f"{out}/model.ckpt-4.*"):
        shutil.move(path, moved_to)
    tf.compat.v1.train.update_checkpoint_state(str(out), "model.ckpt-2", ["model.ckpt-0", "model.ckpt-2"])


def steps(output_dir):
    return [r["global_step"] for r in eval_records.read_eval_results(output_dir)]


@needs_estimator
@pytest.mark.trains
def test_records_stay_in_step_order_when_the_newest_checkpoint_is_lost(copy_of_tiny_run, tmp_path, caplog):
    data, out = copy_of_tiny_run("estimator")  # trained to step 4, evaluated at 2 and 4
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out))
    records = eval_records.read_eval_results(out)
    records[-1]["lost"] = True  # to tell step 4's record of the lost checkpoint from a new one
    (out / eval_records.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    (best_base / "4").mkdir(exist_ok=True)  # as if step 4 had been the best
    (best_base / "4" / "saved_model.pb").write_bytes(b"")
    lose_newest_checkpoint(out, tmp_path / "moved")

    task.main(argv + ["--mode=evaluate"])  # evaluates step 2 again
    assert steps(out) == [2, 2, 4]  # in place, not [2, 4, 2]

    with caplog.at_level(logging.WARNING):
        task.main(argv + ["--train_steps=6"])  # resumes from 2: trains 4 and 6 again
    log = caplog.text
    assert steps(out) == [2, 2, 4, 6]
    assert not any(r.get("lost") for r in eval_records.read_eval_results(out))
    superseded = out / eval_records.SUPERSEDED_SUBDIR
    assert [r["global_step"] for r in eval_records.read_eval_results(superseded)] == [4]
    assert eval_records.read_eval_results(superseded)[0]["lost"]
    assert "the eval records of steps [4], whose checkpoints this run no longer has, moved to" in log
    assert f"best export {best_base}/4 is of a checkpoint this run no longer has" in log
    assert (superseded / signature.BEST_EXPORT_SUBDIR / "image_classifier" / "4" / "saved_model.pb").read_bytes() == b""
    # The final export of the lost checkpoint 4 too: TF Serving would serve it over this run's.
    export_base = out / signature.EXPORT_SUBDIR / "image_classifier"
    assert f"export {export_base}/4 is of a checkpoint this run no longer has" in log
    assert (superseded / signature.EXPORT_SUBDIR / "image_classifier" / "4" / "saved_model.pb").exists()
    assert sorted(p.name for p in export_base.iterdir()) == ["6"]
    if (best_base / "4").exists():  # the new step 4, if it was the best: a real export
        assert (best_base / "4" / "saved_model.pb").stat().st_size > 0
