"""OUT/eval_results.jsonl stays in step order when the newest checkpoint is lost: --mode evaluate
of the older one inserts its record in place, and a training run resuming from it sets aside
the records (and the best export) of the lost steps, then evaluates those steps again.

    .venv/bin/python -m pytest tests/trainer/test_eval_record_order.py
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import tensorflow as tf

from common import signature
from tests.engines import needs_estimator
from trainer.run import eval_records


def run_task(argv, repo_root):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "trainer.task", *argv], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def lose_newest_checkpoint(out, tmp_path):
    """Checkpoint 6 moved out of the run (the fix checkpoints.py names for a damaged one), the
    state naming checkpoint 4."""
    (tmp_path / "moved").mkdir()
    for path in glob.glob(f"{out}/model.ckpt-6.*"):
        shutil.move(path, tmp_path / "moved")
    tf.compat.v1.train.update_checkpoint_state(str(out), "model.ckpt-4", ["model.ckpt-2", "model.ckpt-4"])


def steps(output_dir):
    return [r["global_step"] for r in eval_records.read_eval_results(output_dir)]


@needs_estimator
def test_records_stay_in_step_order_when_the_newest_checkpoint_is_lost(tiny_argv, repo_root, tmp_path):
    out = tmp_path / "out"
    argv = [a for a in tiny_argv if not a.startswith("--train_steps")]
    run_task(argv + ["--train_steps=6"], repo_root)
    records = eval_records.read_eval_results(out)
    records[-1]["lost"] = True  # to tell step 6's record of the lost checkpoint from a new one
    (out / eval_records.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    best_base = out / signature.BEST_EXPORT_SUBDIR / "image_classifier"
    (best_base / "6").mkdir(exist_ok=True)  # as if step 6 had been the best
    (best_base / "6" / "saved_model.pb").write_bytes(b"")
    lose_newest_checkpoint(out, tmp_path)

    run_task(argv + ["--train_steps=6", "--mode=evaluate"], repo_root)  # evaluates step 4 again
    assert steps(out) == [2, 4, 4, 6]  # in place, not [2, 4, 6, 4]

    log = run_task(argv + ["--train_steps=8"], repo_root)  # resumes from 4: trains 6 and 8 again
    assert steps(out) == [2, 4, 4, 6, 8]
    assert not any(r.get("lost") for r in eval_records.read_eval_results(out))
    superseded = out / eval_records.SUPERSEDED_SUBDIR
    assert [r["global_step"] for r in eval_records.read_eval_results(superseded)] == [6]
    assert eval_records.read_eval_results(superseded)[0]["lost"]
    assert "the eval records of steps [6], whose checkpoints this run no longer has, moved to" in log
    assert f"best export {best_base}/6 is of a checkpoint this run no longer has" in log
    assert (superseded / signature.BEST_EXPORT_SUBDIR / "image_classifier" / "6" / "saved_model.pb").read_bytes() == b""
    # The final export of the lost checkpoint 6 too: TF Serving would serve it over this run's.
    export_base = out / signature.EXPORT_SUBDIR / "image_classifier"
    assert f"export {export_base}/6 is of a checkpoint this run no longer has" in log
    assert (superseded / signature.EXPORT_SUBDIR / "image_classifier" / "6" / "saved_model.pb").exists()
    assert sorted(p.name for p in export_base.iterdir()) == ["8"]
    if (best_base / "6").exists():  # the new step 6, if it was the best: a real export
        assert (best_base / "6" / "saved_model.pb").stat().st_size > 0
