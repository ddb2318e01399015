"""What trainer.export_tflite reads and writes, found and checked before anything is converted.

The source: --export_dir (a base or a version directory), else the run's served export,
OUT/export/<serving_model_name>/<highest version>; a checkpoint of the run instead when
--checkpoint names one (a step, a prefix or `latest`) or the run has no export yet (its latest).
A checkpoint is found and checked by the caller's find_checkpoint (trainer/export_tflite.py
wires the run room's checks; this room does not import it) and exported by the caller into a
temporary directory, never into OUT/export. The eval records: --eval_data_path, else the run's
eval_data_path. The output: --tflite_dir, else OUT/tflite/<model>/<version or step>. Each
mistake (no run, neither export nor checkpoint, --checkpoint without a run, no eval files, too
few eval images to calibrate and still check on, an output that exists) is a UserError naming the fix;
nothing is written.

    .venv/bin/python -m trainer.export_tflite --output_dir OUT
"""
import dataclasses
import json
import os

import tensorflow as tf

from common import export_versions, signature
from common.user_errors import UserError
from trainer.export import tflite_check, tflite_files
from trainer.settings import table

TFLITE_SUBDIR = "tflite"  # OUT/tflite/<model_name>/<version>/
LATEST = "latest"  # --checkpoint latest: the run's latest checkpoint, as the run would resume from it


class TFLiteSourceError(UserError):
    """A run, export, eval data or output directory trainer.export_tflite cannot use."""


@dataclasses.dataclass
class Plan:
    export_dir: str  # None: the checkpoint is exported first, into a temporary directory
    eval_paths: list
    tflite_dir: str
    source: dict  # what tflite_metadata.json records of where the models came from:
    # {export_dir, version} or {checkpoint, step, engine}
    split: tflite_check.EvalSplit  # which eval records calibrate the int8 model; the others check both
    checkpoint: str = None  # the checked checkpoint prefix when the models come from one

    def describe_source(self):
        """Where the models came from, for the command's last line."""
        if self.checkpoint is None:
            return f"export {self.export_dir}"
        return f"checkpoint {self.checkpoint}, exported to a temporary SavedModel"


def read_run_params(output_dir):
    """OUT/params.json; TFLiteSourceError when OUT is not a trainer run directory."""
    path = os.path.join(output_dir, table.PARAMS_FILE)
    if not tf.io.gfile.exists(path):
        raise TFLiteSourceError(f"--output_dir={output_dir} is not a training run (no {table.PARAMS_FILE}); "
                                "pass the --output_dir of a trainer.task run, or --export_dir")
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def model_name(params):
    return params.get("serving_model_name") or signature.DEFAULT_MODEL_NAME


def find_export(args, params):
    """(export version directory, version), or (None, None) when the models come from a
    checkpoint: --checkpoint given, or a run with no export under OUT/export/<model>."""
    if args.export_dir:
        return export_versions.resolve_export_dir(args.export_dir)
    base = os.path.join(args.output_dir, signature.EXPORT_SUBDIR, model_name(params))
    if args.checkpoint or export_versions.latest_version(base) is None:
        return None, None
    return export_versions.resolve_export_dir(base)


def find_checkpoint_source(args, params, find_checkpoint):
    """(checkpoint prefix, step, source) of --checkpoint, or of the latest checkpoint of a run
    without an export. find_checkpoint(output_dir, wanted or None for the latest) -> (checked
    prefix, step), (None, 0) when the run has none; it raises the run's one line for a damaged
    or missing one."""
    wanted = None if args.checkpoint in (None, LATEST) else args.checkpoint
    prefix, step = find_checkpoint(args.output_dir, wanted)
    if prefix is None:
        raise TFLiteSourceError(
            f"{args.output_dir} has no export under {signature.EXPORT_SUBDIR}/{model_name(params)} "
            f"and no checkpoint: train first (python -m trainer.task --output_dir {args.output_dir} ...)")
    engine = params.get("engine") or table.DEFAULTS["engine"]
    return prefix, step, {"checkpoint": prefix, "step": step, "engine": engine}


def find_eval_paths(args, params):
    pattern = args.eval_data_path or params.get("eval_data_path")
    if not pattern:
        raise TFLiteSourceError("no eval data: pass --eval_data_path 'DIR/eval-*' (quoted)")
    paths = sorted(tf.io.gfile.glob(pattern))
    if not paths:
        raise TFLiteSourceError(f"--eval_data_path={pattern} matches no files; "
                                "pass the eval TFRecords, e.g. 'DIR/eval-*' (quoted)")
    return paths


def split_eval_records(eval_paths, count):
    """tflite_check.EvalSplit of the eval records: count calibrate, at least one is left to check."""
    if count < 1:
        raise TFLiteSourceError(f"--calibration_images={count} must be 1 or more")
    found = tflite_check.count_eval_examples(eval_paths)
    if found <= count:
        fix = f"--calibration_images={found - 1} or fewer, or " if found > 1 else ""
        raise TFLiteSourceError(
            f"the eval records hold {found} images: --calibration_images={count} leaves none to check "
            f"the models on (the check scores only images the int8 model was not calibrated on); "
            f"pass {fix}more eval data")
    return tflite_check.EvalSplit(count, found)


def find_tflite_dir(args, model, version):
    """--tflite_dir, else OUT/tflite/<model>/<version> (a checkpoint's step is the version its
    export would have)."""
    if args.tflite_dir:
        tflite_dir = args.tflite_dir
    elif args.output_dir:
        tflite_dir = os.path.join(args.output_dir, TFLITE_SUBDIR, model, str(version))
    else:
        raise TFLiteSourceError("--export_dir without --output_dir needs --tflite_dir DIR")
    if tf.io.gfile.exists(tflite_dir):
        raise TFLiteSourceError(f"{tflite_dir} exists; remove it or pass another --tflite_dir")
    above = None if "://" in tflite_dir else (os.path.dirname(tflite_dir.rstrip("/")) or ".")
    while above and not tf.io.gfile.exists(above):  # "/" and "." exist: it ends
        above = os.path.dirname(above) or "."
    if above and not tf.io.gfile.isdir(above):
        raise TFLiteSourceError(f"{tflite_dir} is under {above}, which is a file, not a folder; "
                                "pass another --tflite_dir")
    return tflite_dir


def check_source_flags(args):
    if not (args.output_dir or args.export_dir):
        raise TFLiteSourceError("pass --output_dir OUT (a trainer.task run) or --export_dir DIR")
    if args.checkpoint and (args.export_dir or not args.output_dir):
        raise TFLiteSourceError(f"--checkpoint={args.checkpoint} is a checkpoint of a run: pass its "
                                "--output_dir OUT, without --export_dir")


def plan(args, find_checkpoint):
    """Plan of the parsed flags, every mistake refused before anything is written.
    find_checkpoint: see find_checkpoint_source."""
    check_source_flags(args)
    params = read_run_params(args.output_dir) if args.output_dir else {}
    export_dir, version = find_export(args, params)
    checkpoint = None
    if export_dir is None:
        checkpoint, version, source = find_checkpoint_source(args, params, find_checkpoint)
        model = model_name(params)
    else:
        source = {"export_dir": export_dir, "version": version}
        model = os.path.basename(os.path.dirname(export_dir.rstrip("/")))
    eval_paths = find_eval_paths(args, params)
    split = split_eval_records(eval_paths, args.calibration_images)
    tflite_dir = find_tflite_dir(args, model, version)
    return Plan(export_dir, eval_paths, tflite_dir, source, split, checkpoint)


def format_check(check, plan):
    """The check as a small table (max |diff|: the largest difference of a class's probability
    from the SavedModel's), then where the models are and which images checked them."""
    rows = [("model", "top-1 agreement", "max |diff|", "accuracy"),
            ("SavedModel", "-", "-", f"{check['savedmodel_accuracy']:.4f}")]
    rows += [(name, f"{check[name]['top1_agreement']:.2%}", f"{check[name]['max_abs_diff']:.2g}",
              f"{check[name]['accuracy']:.4f}") for name in (tflite_files.FLOAT32_FILE, tflite_files.INT8_FILE)]
    lines = [f"{a:<20}{b:>16}{c:>12}{d:>10}" for a, b, c, d in rows]
    lines.append(f"tflite: {plan.tflite_dir} ({plan.describe_source()}, checked on {check['images']} eval "
                 f"images, none of the {plan.split.calibrating} that calibrated the int8 model; "
                 f"float32 agreement goal {check['float32_agreement_goal']:.1%})")
    return "\n".join(lines)
