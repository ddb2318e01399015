"""Benchmark: the Keras engine's training steps/s against the Estimator engine's, and a warm-started fine-tune.

    .venv/bin/python -m bench.bench_train                 # from the repo root; ~9 minutes on 2 cores
    .venv/bin/python -m bench.bench_train --quick         # ~4 minutes: 2 rounds, 1 fine-tune repeat
    .venv/bin/python -m bench.bench_train --models small_cnn --rounds 2 --steps 40 --finetune_steps 0
    .venv/bin/python -m bench.bench_train --models resnet50,efficientnet_b0,mobilenet_v2 \
        --photo_rounds 2 --photo_steps 20 --photo_batch_size 4 --finetune_steps 0   # 224x224, ~8 min

Both engines train the identical network (trainer.nets.build_network with
trainer/settings/table.py's defaults) with the same step (the shared loss, learning
rate and optimizer of trainer/objective/) at the same batch on the same data: one
dataset definition, trainer.data.input's TRAIN input_fn over demo-style digit
TFRecords, with its first batches cached so that both measure the training step
rather than JPEG decoding. The Estimator engine runs trainer/estimator/engine.py's
make_estimator (the real RunConfig, model_fn, summaries and checkpoints: one step per
session.run off TPU); the Keras engine runs trainer/keras/train.py's train function on
trainer/keras/model.py's TrainingModel as the engine does (iterations_per_loop steps
per call), timed after a warm-up call that traces it. The machine is shared, so rounds
alternate and each ratio compares runs of the same round.

Also prints each engine's CPU seconds per step (all threads), the steadier comparison
when other jobs share the cores. Goal: Keras engine >= 1.0 x Estimator engine by steps/s
(the same work, no Estimator overhead), the median of the per-round ratios
(bench/report.py: MET when it is at or above the goal). One table; the libraries' lines
go to the log file it names.

The networks with a backbone (resnet50, efficientnet_b0, mobilenet_v2) run at
--photo_image_size (224) with --photo_batch_size, --photo_steps and
--photo_rounds (seconds per step on a CPU): the digits are upscaled by the
input_fn, which costs nothing here (cached batches).

Fine-tuning (--finetune_steps > 0): the scikit-learn digits 0-4 train a source
run of --finetune_model; digits 5-9 (a 5-class dataset of its own) then train
twice for --finetune_steps, from scratch and warm-started from the source
(--warm_start_from, classifier excluded), on the first
--finetune_train_per_label images of each digit, evaluated every
--finetune_eval_every steps on all the other images of 5-9 (846 with 10 per
digit); each of the two runs --finetune_repeats times, its accuracy curves
averaged (single unseeded runs reached scratch's final accuracy at steps
100-180 of 200; in the measured pairs, averaged, 140-200). Reported: each run's
mean accuracy curve and the first evaluation at which each run reaches the
scratch run's final accuracy, taken as the mean of its
last FINAL_EVALUATIONS evaluations (a lucky or unlucky last evaluation does not
set the bar; the scratch run always reaches it, by its last evaluations at the
latest). Goal: the warm-started run at most half the steps; the comparison
counts only when from scratch needs more than half of its steps to get there
(a run that is done at its first evaluation can show no speed-up), else it says
INCONCLUSIVE.
"""
import json
import logging
import os
import statistics
import sys
import tempfile
import time

from bench import cli, report as report_lib


def build_parser():
    parser = cli.make_parser("bench_train", __doc__, "2 rounds of 30 steps, one fine-tune repeat")
    parser.add_argument("--models", default="small_cnn,resnet",
                        help="comma-separated nets ('' for none; also resnet50, efficientnet_b0, "
                             "mobilenet_v2 at --photo_image_size)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per model")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--examples", type=int, default=1024, help="digit JPEGs written")
    parser.add_argument("--photo_image_size", type=int, default=224,
                        help="image size of the backbone networks")
    parser.add_argument("--photo_batch_size", type=int, default=8,
                        help="batch of the backbone networks (224 px on CPU: seconds per step)")
    parser.add_argument("--photo_steps", type=int, default=24, help="training steps per run, photo nets")
    parser.add_argument("--photo_rounds", type=int, default=3, help="alternating rounds, photo nets")
    # small_cnn: a fine-tune of an ImageNet network on 2 CPU cores takes hours, not minutes;
    # MobileNetV2's batch norm (momentum 0.999) needs thousands of steps before eval means anything.
    parser.add_argument("--finetune_model", default="small_cnn")
    parser.add_argument("--finetune_image_size", type=int, default=32)
    parser.add_argument("--finetune_source_steps", type=int, default=400)
    parser.add_argument("--finetune_steps", type=int, default=200, help="0: no fine-tune benchmark")
    parser.add_argument("--finetune_eval_every", type=int, default=20)
    # A fine-tune's usual few target images, few enough that from scratch still learns for
    # most of its steps (docs/benchmarks.md#training: why 10 per digit), and one rate for
    # both runs (a slower rate for scratch alone would be unfair).
    parser.add_argument("--finetune_learning_rate", type=float, default=0.002,
                        help="--learning_rate of both target runs")
    parser.add_argument("--finetune_train_per_label", type=int, default=10,
                        help="target training images per digit; all the others evaluate")
    parser.add_argument("--finetune_repeats", type=int, default=2,
                        help="runs of each target run, their accuracy curves averaged")
    return parser


def parse_args(argv=None):
    """build_parser's flags, with --finetune_repeats checked before anything runs."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.finetune_repeats < 1:
        parser.error(f"--finetune_repeats={args.finetune_repeats} must be at least 1")
    if args.quick:
        args.rounds, args.steps, args.photo_rounds, args.finetune_repeats = 2, 30, 1, 1
    return args


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads
    cli.answer_flags_first(parse_args)


import tensorflow as tf  # noqa: E402

from bench.bench_input import make_digit_jpegs  # noqa: E402
from bench.train_timing import WARMUP_STEPS, make_cached_input_fn, run_keras, write_splits  # noqa: E402
from trainer import chain, nets  # noqa: E402
from trainer.estimator import engine as estimator_engine  # noqa: E402
from trainer.run import eval_records  # noqa: E402

ModeKeys = tf.estimator.ModeKeys
# Scratch's final accuracy is the mean of its last evaluations: one evaluation's ups and downs
# on a plateau (docs/benchmarks.md#training) must not decide whether a run "reached" it.
FINAL_EVALUATIONS = 3
GOAL_KERAS_VS_ESTIMATOR = 1.0


def write_dataset(directory, count):
    """Digit TFRecords plus labels.txt and metadata.json, as preprocess writes them."""
    write_splits(directory, {"train": make_digit_jpegs(count)}, [str(i) for i in range(10)])
    return f"{directory}/train-*"


class StepTimes(tf.compat.v1.train.SessionRunHook):
    """Wall and process CPU time after every step of TPUEstimator.train.

    CPU time (all threads) is the steadier figure on a shared machine.
    """

    def __init__(self):
        super().__init__()
        self.times = []

    def after_run(self, run_context, run_values):
        self.times.append((time.perf_counter(), time.process_time()))

    def rates(self):
        """(steps per wall second, CPU seconds per step) after the warm-up steps."""
        (wall_0, cpu_0), (wall_1, cpu_1) = self.times[WARMUP_STEPS], self.times[-1]
        steps = len(self.times) - 1 - WARMUP_STEPS
        return steps / (wall_1 - wall_0), (cpu_1 - cpu_0) / steps


def run_estimator(params, input_fn, steps):
    # A fresh model_dir per run, inside the benchmark's temporary directory.
    params = dict(params, output_dir=tempfile.mkdtemp(prefix="estimator_", dir=params["output_dir"]))
    timer = StepTimes()
    estimator_engine.make_estimator(params).train(input_fn, steps=steps, hooks=[timer])
    return timer.rates()


def bench_model(params, input_fn, rounds, steps):
    """Alternating rounds of estimator, keras; returns the per-round figures."""
    rows = []
    for _ in range(rounds):
        estimator, estimator_cpu = run_estimator(params, input_fn, steps)
        keras, keras_cpu = run_keras(params, input_fn, steps)
        rows.append({"estimator": estimator, "keras": keras,
                     "estimator_cpu": estimator_cpu, "keras_cpu": keras_cpu})
    return rows


def speed_row(name, params, rows):
    """A table row: each engine's median steps/s and CPU ms per step, and the Keras / Estimator
    ratios (medians of the per-round ratios, with their spread)."""
    median = lambda key: statistics.median(row[key] for row in rows)  # noqa: E731
    return [name, params["image_size"], params["train_batch_size"],
            f"{median('estimator'):.2f}", f"{median('keras'):.2f}",
            report_lib.ratio_figure(wall_ratios(rows)),
            f"{1e3 * median('estimator_cpu'):.0f} / {1e3 * median('keras_cpu'):.0f}",
            report_lib.ratio_figure(row["estimator_cpu"] / row["keras_cpu"] for row in rows)]


def wall_ratios(rows):
    return [row["keras"] / row["estimator"] for row in rows]


def model_params(name, pattern, directory, args):
    """The resolved params of one benchmarked network: photo settings for backbone networks."""
    flags = {"train_data_path": pattern, "output_dir": directory, "mode": "train_and_eval",
             "eval_data_path": pattern, "model": name}
    if nets.has_backbone(name):
        flags.update(image_size=args.photo_image_size, train_batch_size=args.photo_batch_size)
    return chain.resolve(flags)


def print_report(header, speeds, finetune):
    """The one table (engine speeds), the goal lines, the fine-tune table as notes."""
    goals = [report_lib.goal_line(f"{name}: Keras engine / Estimator engine, steps/s",
                                  wall_ratios(rows), GOAL_KERAS_VS_ESTIMATOR)
             for name, (_, rows) in speeds.items()]
    notes = list(finetune)
    figures = ", ".join(f"{name} {report_lib.ratio_figure(wall_ratios(rows))}"
                        for name, (_, rows) in speeds.items())
    if speeds:
        notes.append(f"docs row: | training | Keras engine >= {GOAL_KERAS_VS_ESTIMATOR:.1f}x the "
                     f"Estimator engine (steps/s) | {figures} | `.venv/bin/python -m bench.bench_train` |")
    report_lib.print_report(
        None, "bench_train: training steps/s, Keras engine against Estimator engine", header,
        ["model", "px", "batch", "Estimator steps/s", "Keras steps/s", "Keras / Estimator, steps/s",
         "CPU ms/step, Estimator / Keras", "Keras / Estimator, by CPU per step"],
        [speed_row(name, params, rows) for name, (params, rows) in speeds.items()], goals, notes)


def run(argv=None):
    args = parse_args(argv)
    log_path = cli.log_path(args, "bench_train")
    header = (f"{report_lib.machine_line()}; TensorFlow {tf.__version__}; {args.rounds} rounds x "
              f"{args.steps} steps (backbone networks: {args.photo_rounds} x {args.photo_steps}; "
              f"{WARMUP_STEPS} warm-up steps not timed); library lines: {log_path}")
    with report_lib.libraries_to_log(log_path):
        tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.WARN)
        speeds, finetune = measure(args)
    print_report(header, speeds, finetune[1] if finetune else [])
    return dict(speeds, **({"finetune": finetune[0]} if finetune else {}))


def measure(args):
    """({model: (params, per-round rows)}, (fine-tune runs, its table's lines) or None)."""
    speeds, finetune = {}, None
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_dataset(directory, args.examples)
        input_fn = make_cached_input_fn(pattern)
        for name in filter(None, args.models.split(",")):
            params = model_params(name, pattern, directory, args)
            photo = nets.has_backbone(name)
            rounds, steps = (args.photo_rounds, args.photo_steps) if photo else (args.rounds, args.steps)
            speeds[name] = (params, bench_model(params, input_fn, rounds, steps))
        if args.finetune_steps:
            finetune = bench_finetune(f"{directory}/finetune", args)
    return speeds, finetune


def split_digits(labels, train_per_label=None, eval_every=5):
    """{"train": [...], "eval": [...]} of the scikit-learn digits whose label is in labels,
    relabelled 0..len(labels)-1. With train_per_label, the first train_per_label images of
    each label train and all the others evaluate: ~180 held-out images moved the accuracy
    by 0.006 per image and let noise decide the comparison. Without, every eval_every-th
    image of each label is held out and the others train."""
    splits, seen = {"train": [], "eval": []}, {}
    for jpeg, digit in make_digit_jpegs(1797):
        if str(digit) in labels:
            index = labels.index(str(digit))
            seen[index] = seen.get(index, 0) + 1
            if train_per_label is None:
                is_eval = seen[index] % eval_every == 0
            else:
                is_eval = seen[index] > train_per_label
            splits["eval" if is_eval else "train"].append((jpeg, index))
    return splits


def train_run(data_dir, output_dir, args, steps, **flags):
    """Runs trainer/loop on one digit dataset; returns [(step, eval accuracy)]."""
    params = chain.resolve(dict(
        train_data_path=f"{data_dir}/train-*", eval_data_path=f"{data_dir}/eval-*",
        output_dir=output_dir, model=args.finetune_model, image_size=args.finetune_image_size,
        train_steps=steps, steps_per_eval=args.finetune_eval_every,
        warmup_steps=min(100, steps // 10), **flags))
    start = time.perf_counter()
    estimator_engine.run(params)
    seconds = time.perf_counter() - start
    with open(os.path.join(output_dir, eval_records.RESULTS_FILE)) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r["global_step"], r["accuracy"]) for r in records], seconds


def first_step_reaching(curve, accuracy):
    return next((step for step, value in curve if value >= accuracy), None)


def average_runs(results):
    """[([(step, accuracy)], seconds)] of repeated runs -> ([(step, mean accuracy)], total seconds)."""
    curves = [curve for curve, _ in results]
    steps = [step for step, _ in curves[0]]
    if any([step for step, _ in curve] != steps for curve in curves):
        raise ValueError(f"repeated runs evaluated at different steps: {curves}")
    mean = [(step, statistics.mean(curve[i][1] for curve in curves)) for i, step in enumerate(steps)]
    return mean, sum(seconds for _, seconds in results)


def final_accuracy(curve):
    """The mean of the last FINAL_EVALUATIONS accuracies of [(step, accuracy)]."""
    return statistics.mean(value for _, value in curve[-FINAL_EVALUATIONS:])


def bench_finetune(directory, args):
    """Source on digits 0-4; target digits 5-9 from scratch and warm-started; returns (the
    averaged runs, the lines of their table)."""
    logging.getLogger().setLevel(logging.WARNING)
    tf.get_logger().setLevel(logging.ERROR)  # TF's deprecation notes, once per graph
    digits = [str(i) for i in range(10)]
    write_splits(f"{directory}/source_data", split_digits(digits[:5]), digits[:5])
    target_splits = split_digits(digits[5:], args.finetune_train_per_label)
    write_splits(f"{directory}/target_data", target_splits, digits[5:])
    source, source_seconds = train_run(f"{directory}/source_data", f"{directory}/source", args,
                                       args.finetune_source_steps)
    target = {"learning_rate": args.finetune_learning_rate}
    repeats = {"from scratch": [], "warm-started": []}
    for repeat in range(args.finetune_repeats):  # alternating: the machine's load hits both alike
        repeats["from scratch"].append(train_run(f"{directory}/target_data", f"{directory}/scratch{repeat}",
                                                 args, args.finetune_steps, **target))
        repeats["warm-started"].append(train_run(
            f"{directory}/target_data", f"{directory}/warm{repeat}", args, args.finetune_steps,
            warm_start_from=f"{directory}/source", **target))
    runs = {name: average_runs(results) for name, results in repeats.items()}
    return runs, finetune_lines(args, source, source_seconds, runs, len(target_splits["eval"]))


def finetune_lines(args, source, source_seconds, runs, eval_images):
    target = final_accuracy(runs["from scratch"][0])
    lines = [
        f"Fine-tuning {args.finetune_model} at {args.finetune_image_size} px: source digits 0-4, "
        f"{args.finetune_source_steps} steps ({source_seconds:.0f} s), eval accuracy {source[-1][1]:.3f}; "
        f"target digits 5-9 ({args.finetune_train_per_label} training images each, "
        f"{eval_images} eval images, learning_rate {args.finetune_learning_rate}), mean of "
        f"{args.finetune_repeats} run(s) each, {args.finetune_steps} steps, eval every "
        f"{args.finetune_eval_every}; scratch's final accuracy = the mean of its last "
        f"{FINAL_EVALUATIONS} evaluations, {target:.4f}", "",
        "| target run | " + " | ".join(f"step {step}" for step, _ in runs["from scratch"][0])
        + f" | steps to reach scratch's final {target:.4f} (bold) | time |",
        "|---|" + "---|" * (len(runs["from scratch"][0]) + 2)]
    for name, (curve, seconds) in runs.items():
        reached = first_step_reaching(curve, target)
        cells = (f"**{value:.3f}**" if step == reached else f"{value:.3f}" for step, value in curve)
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {reached if reached is not None else 'not reached'} | {seconds:.0f} s in all |")
    return lines + ["", "goal: " + finetune_verdict(runs, target, args.finetune_steps)]


def finetune_verdict(runs, target, steps):
    """One line: did warm start reach scratch's final accuracy (final_accuracy) in at most half
    the steps? Only conclusive when from scratch needed more than half of its own steps to get there."""
    scratch = first_step_reaching(runs["from scratch"][0], target)
    warm = first_step_reaching(runs["warm-started"][0], target)
    if scratch <= steps / 2:
        return (f"INCONCLUSIVE: from scratch reaches its final {target:.4f} at step {scratch} of "
                f"{steps}, no later than half: fewer --finetune_train_per_label, or a lower "
                f"--finetune_learning_rate (both runs use it)")
    verdict = "MET" if warm is not None and warm <= steps / 2 else "NOT MET"
    reached = f"at step {warm} of {steps}" if warm is not None else f"in none of its {steps} steps"
    return (f"warm-started reaches {target:.4f} {reached}, from scratch at step "
            f"{scratch} (goal: warm-started <= half): {verdict}")


if __name__ == "__main__":
    run(sys.argv[1:])
