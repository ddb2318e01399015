"""Batch-prediction throughput: trainer --mode predict and the Beam route vs the SavedModel in-process.

    .venv/bin/python -m bench.bench_batch_predict     # the demo run (make demo), ~2 minutes on 2 cores
    .venv/bin/python -m bench.bench_batch_predict --run_dir OUT --input_csv images.csv

All three classify the same images in the same process run (the machine is
shared: only same-run ratios mean much), each end to end from the CSV:
  in-process  load the export, read the files, call serving_default in batches
  trainer     python -m trainer.task --mode predict (TPUEstimator.predict, CPU), checkpoint
  beam        python -m serving.batch_predict (RunInference, local FnApiRunner, all cores)
It prints images/second of each and its ratio to in-process, plus the
in-process model-call rate alone (no load, no file reads).

Its figures, and what they show (reading and decode-checking the files and starting
up dominate every route at the demo's image size): docs/benchmarks.md#batch-prediction.
"""
import glob
import os
import shutil
import tempfile
import time

from common import console


def build_parser():
    parser = console.ArgumentParser(prog="python -m bench.bench_batch_predict",
                                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", default="work/demo/run")
    parser.add_argument("--input_csv", default="work/demo/images/eval.csv")
    parser.add_argument("--batch_size", type=int, default=64, help="predict batch of every route")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads;
    build_parser().parse_args()  # the entry point below parses them again
    console.quiet_unless_verbose([])  # the libraries' start-up and deprecation lines off


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import export_predictor, export_versions, prediction_inputs, signature  # noqa: E402

from serving import batch_predict  # noqa: E402
from trainer import chain  # noqa: E402
from trainer.estimator import loop  # noqa: E402


def time_in_process(export_dir, input_csv, batch_size):
    """(end-to-end seconds, model-call seconds, image count) for the export called in-process."""
    start = time.perf_counter()
    export = export_predictor.load_export(export_dir)
    images = [i for i in prediction_inputs.read_inputs(input_csv) if not i.error]
    call_start = time.perf_counter()
    export_predictor.predict_in_batches(export, [i.jpeg for i in images], batch_size)
    end = time.perf_counter()
    return end - start, end - call_start, len(images)


def time_trainer(run_dir, input_csv, batch_size, scratch):
    """Seconds of --mode predict on a copy of run_dir (its params.json is rewritten)."""
    copy = os.path.join(scratch, "run")
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("predictions", "eval"))
    start = time.perf_counter()
    loop.run(chain.parse_params([f"--output_dir={copy}", "--mode=predict",
                                f"--predict_input={input_csv}", f"--predict_batch_size={batch_size}"]))
    return time.perf_counter() - start


def time_beam(export_dir, input_csv, batch_size, scratch):
    start = time.perf_counter()
    batch_predict.run([f"--input_csv={input_csv}", f"--model_dir={export_dir}",
                       f"--output={scratch}/beam/predictions", f"--max_batch_size={batch_size}"])
    return time.perf_counter() - start


def latest_export(run_dir):
    """The highest version of run_dir/export/<model>/ (export_versions' rule); ExportNotFound
    (one line) when there is none."""
    bases = glob.glob(os.path.join(run_dir, signature.EXPORT_SUBDIR, "*"))
    found = [(export_versions.latest_version(base), base) for base in bases]
    found = [(version, base) for version, base in found if version is not None]
    if not found:
        raise export_versions.ExportNotFound(
            f"--run_dir={run_dir!r} has no export/<model>/<version>; run make demo")
    version, base = max(found)
    return export_versions.version_dir(base, version)


def time_routes(args):
    """(export dir, image count, model-call seconds, {route: images per second})."""
    export_dir = latest_export(args.run_dir)
    with tempfile.TemporaryDirectory() as scratch:
        total, call, count = time_in_process(export_dir, args.input_csv, args.batch_size)
        rates = {"in-process": count / total,
                 "trainer": count / time_trainer(args.run_dir, args.input_csv, args.batch_size, scratch),
                 "beam": count / time_beam(export_dir, args.input_csv, args.batch_size, scratch)}
    return export_dir, count, call, rates


def main(argv=None):
    """The benchmark; a missing run, export or CSV is one "error:" line and exit code 2."""
    args = build_parser().parse_args(argv)
    export_dir, count, call, rates = console.exit_on_user_error(time_routes, args)
    print(f"\n{count} images, batch {args.batch_size}, export {export_dir}")
    print(f"{'route':<12}{'images/s':>10}{'vs in-process':>15}")
    for name, rate in rates.items():
        print(f"{name:<12}{rate:>10.1f}{rate / rates['in-process']:>14.2f}x")
    print(f"in-process model calls alone: {count / call:.1f} images/s")


if __name__ == "__main__":
    main()
