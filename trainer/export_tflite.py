"""Entry point: an export or a checkpoint -> float32 and int8 TFLite models, their metadata, and their check.

The export is a run's served one (OUT/export/<model>/<highest version>) or any export given by
--export_dir. A run without an export, or --checkpoint STEP|PREFIX|latest, gives a checkpoint
instead: checked as the run checks its own (trainer/run/checkpoints.py), then exported by the
run's engine (made from OUT/params.json by the settings chain, as `trainer.task --mode export`
makes it; the engine's own export path, so the models are cut from what TF Serving would serve)
into a temporary directory, never into OUT/export (a new version there would change what TF
Serving serves). The int8 model is calibrated on --calibration_images eval images spread evenly
over the records; both models are then checked against the SavedModel on the other eval records,
none of which calibrated it (trainer/export/tflite_check.py: top-1 agreement and the max |diff|
of the probabilities), and written, with tflite_metadata.json (the preprocessing they
need, and the export or checkpoint they came from) and tflite_check.json, to
OUT/tflite/<model>/<version or step>/ (trainer/export/tflite_files.py). A mistake
(trainer/export/tflite_sources.py, a damaged or missing checkpoint) is one line, exit code 2,
nothing written; a float32 model that agrees with its SavedModel on fewer than 99.5% of the eval
images is written, said in one line, and exit code 1.

    .venv/bin/python -m trainer.export_tflite --output_dir work/demo/run
    .venv/bin/python -m trainer.export_tflite --output_dir work/demo/run --checkpoint 1000
    .venv-keras/bin/python -m trainer.export_tflite --export_dir OUT/best_export/image_classifier \\
        --eval_data_path 'DIR/eval-*' --tflite_dir /tmp/tflite
"""
import contextlib
import os
import re
import sys
import tempfile

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once

from common.user_errors import UserError  # noqa: E402

# TFLite's guide: "around ~100-500 samples" calibrate the ranges; the fewest leaves the most eval
# images to check on (the demo's 340: 240), and the check never scores a calibration image.
DEFAULT_CALIBRATION_IMAGES = 100


def make_parser():
    parser = console.ArgumentParser(
        prog="python -m trainer.export_tflite",
        description="Convert an export, or a run's checkpoint, to float32 and int8 (full-integer) "
                    "TFLite models, write the preprocessing they need beside them and check both "
                    "against the SavedModel on the eval records.")
    parser.add_argument("--output_dir", metavar="OUT",
                        help="a trainer.task run: its served export (OUT/export/<model>/<highest "
                             "version>) or, without one, its latest checkpoint; its eval data; OUT/tflite/")
    parser.add_argument("--export_dir", help="an export base or version directory (default: the run's)")
    parser.add_argument("--checkpoint", metavar="STEP|PREFIX|latest",
                        help="convert this checkpoint of the run (exported to a temporary directory, "
                             "not to OUT/export) instead of its export; default: the export, or "
                             "the latest checkpoint when the run has none")
    parser.add_argument("--eval_data_path", metavar="GLOB",
                        help="eval TFRecords, split for the calibration and the check (default: the run's)")
    parser.add_argument("--tflite_dir", help="where the models go (default: OUT/tflite/<model>/<version>); "
                                             "must not exist")
    parser.add_argument("--calibration_images", type=int, default=DEFAULT_CALIBRATION_IMAGES,
                        help="eval images, spread over the records, that calibrate the int8 model; "
                             f"the others check both models (default: {DEFAULT_CALIBRATION_IMAGES})")
    console.add_verbosity_flags(parser)
    return parser


def main(argv=None):
    console.configure_logging(VERBOSITY)
    args = make_parser().parse_args(sys.argv[1:] if argv is None else argv)
    # Ctrl-C or SIGTERM from here on: one line and exit code 130 or 143, nothing half-written.
    with console.exit_on_interrupt(lambda: "the models were not written (they appear only whole; "
                                           "the next run removes a .staging folder left beside "
                                           "them); run the same command again"):
        return convert(args)


def convert(args):
    """The plan, the models written whole and their check printed; tflite_dir."""
    from trainer.export import tflite, tflite_check, tflite_files, tflite_sources  # TensorFlow loads now
    try:
        plan = tflite_sources.plan(args, find_checkpoint)
        # The converter's MLIR summary and the interpreter's delegate line are C++ lines
        # written straight to stderr's descriptor; -v shows them.
        with console.native_stderr_muted(VERBOSITY == 0), saved_model_of(plan, args.output_dir) as saved:
            check = tflite.export_tflite(saved, plan.eval_paths, plan.tflite_dir, plan.split, plan.source)
    except UserError as err:  # no run, export or checkpoint, no eval data, too few images, a damaged
        console.exit_with_error(err)  # export, another dataset's records, a full disk
    print(tflite_sources.format_check(check, plan), flush=True)
    problem = tflite_check.shortfall(check, tflite_files.FLOAT32_FILE)
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(1)
    return plan.tflite_dir


def find_checkpoint(output_dir, wanted):
    """(prefix, step) of the run's checkpoint `wanted` (a step or a model.ckpt-<step> prefix;
    None: the latest, the one the run resumes from), checked to restore whole; (None, 0) when
    the run holds none. A damaged or missing one is a CheckpointError: one line."""
    from trainer.run import checkpoints
    found = checkpoints.list_checkpoints(output_dir)
    if wanted is not None:
        return find_named_checkpoint(output_dir, wanted, found)
    if not found and not checkpoints.unindexed_checkpoints(output_dir):
        return None, 0
    return checkpoints.check_run_state(output_dir, repair=False, say=False)


def find_named_checkpoint(output_dir, wanted, found):
    """(prefix, step) of --checkpoint=wanted among found ([(step, prefix)] of output_dir)."""
    from trainer.run import checkpoints
    step, by_step = checkpoint_step(output_dir, wanted), dict(found)
    steps = ", ".join(str(s) for s in by_step) or "none"
    unindexed = checkpoints.unindexed_checkpoints(output_dir)
    if step in unindexed:
        damage = f"{os.path.basename(unindexed[step])}.index is missing (its data is here)"
    elif step not in by_step:
        raise checkpoints.CheckpointError(f"--checkpoint={wanted}: {output_dir} has no checkpoint of "
                                          f"step {step} (its steps: {steps}); pass one of them, or latest")
    else:
        damage = checkpoints.restore_problem(by_step[step])
    if damage:
        raise checkpoints.CheckpointError(
            f"checkpoint {by_step.get(step) or unindexed[step]} (step {step}) is damaged: {damage}; "
            f"pass another --checkpoint (steps: {steps}), or restore the files from a copy")
    return by_step[step], step


def checkpoint_step(output_dir, wanted):
    """The step --checkpoint=wanted names: a step, or a model.ckpt-<step> prefix (bare, or in output_dir)."""
    from trainer.run import checkpoints
    match = re.fullmatch(r"(\d+)|model\.ckpt-(\d+)(\.index)?", os.path.basename(wanted))
    elsewhere = os.path.dirname(wanted) and not is_same_dir(os.path.dirname(wanted), output_dir)
    if not match or elsewhere:
        raise checkpoints.CheckpointError(
            f"--checkpoint={wanted} is not a checkpoint of {output_dir}: pass a step, "
            f"a {checkpoints.CHECKPOINT_NAME}-<step> prefix in it, or latest")
    return int(match[1] or match[2])


def is_same_dir(a, b):
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


@contextlib.contextmanager
def saved_model_of(plan, output_dir):
    """The SavedModel directory to convert: the plan's export, or its checkpoint exported by
    the run's engine into a temporary directory (removed after the conversion and check)."""
    if plan.checkpoint is None:
        yield plan.export_dir
        return
    with tempfile.TemporaryDirectory(prefix="tflite_export_") as staging_base:
        yield export_checkpoint(output_dir, plan.checkpoint, staging_base)


def export_checkpoint(output_dir, checkpoint_path, staging_base):
    """The SavedModel of checkpoint_path, written under staging_base by the run's own engine
    (trainer/run/engine.py's export) and held to the serving contract, as `trainer.task --mode
    export` writes one (without its warm-up requests, which TFLite has no use for). On this
    machine's CPU, whatever the run trained on."""
    from trainer import chain
    from trainer.export import contract
    params = chain.resolve({"output_dir": output_dir, "mode": "export", "use_tpu": False})
    staged = make_engine(params).export(checkpoint_path, staging_base)
    contract.check_export(staged)
    return staged


def make_engine(params):
    """The engine params["engine"] names, made from params as trainer/run/driver.py makes it
    (each engine's run hands its class to the driver: trainer/keras/engine.py, trainer/estimator/engine.py);
    a JAX run's export is its tf-keras twin's, which needs no JAX (trainer/jax/export.py)."""
    from trainer import task
    if params["engine"] == "jax":
        from trainer.jax.export import TwinExport
        return TwinExport(params)
    if params["engine"] == "keras":
        from trainer.keras.engine import KerasEngine
        return KerasEngine(params)
    if not task.is_estimator_installed():
        raise UserError(task.ESTIMATOR_MISSING)
    from trainer.estimator.engine import EstimatorEngine
    return EstimatorEngine(params)


if __name__ == "__main__":
    main()
