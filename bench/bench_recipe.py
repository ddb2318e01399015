"""Benchmark: held-out accuracy with and without a small-data recipe, on ~10 demo digits per class.

    .venv/bin/python -m bench.bench_recipe       # from the repo root; 12 trainings, ~5 min on 2 idle cores
    .venv/bin/python -m bench.bench_recipe --quick   # 4 trainings (one seed, 100 steps), ~1 min
    .venv/bin/python -m bench.bench_recipe --steps 600 --seeds 1,2,3,4,5 --engines keras
    .venv-keras/bin/python -m bench.bench_recipe --engines keras   # no tensorflow-estimator there

The data: the demo digits (preprocess.demo_data: scikit-learn's 1,797 digits as 32 px
JPEGs with its fixed train/eval split); the first --train_per_label images of each
digit in the demo's train.csv train, the demo's whole eval.csv (340 images) is held
out. Both go once through the real preprocessing command (python -m
preprocess.jpeg_to_tfrecord), in a temporary directory (or --work_dir).

Each of engine (--engines) x recipe (baseline, recipe) x seed (--seeds) is one run of
the real trainer (python -m trainer.task, a subprocess) with the same steps, batch,
learning rate and schedule: baseline = trainer/settings/table.py's defaults (small_cnn,
Adam with L2 weight decay, the light random crop); recipe = the same plus
--recipe_flags (default RECIPE_FLAGS: RandAugment, mixup/CutMix, AdamW). A recipe of
strong augmentation usually needs more steps than the baseline to pay off: both get
--steps, so the figures hold for that budget only. The accuracy is the run's final
evaluation on the held-out set, read from OUT/eval_results.jsonl.

Prints one markdown table (accuracy per seed, mean +- sample standard deviation, the
difference of the means, seconds per run) under a header that pastes into
docs/benchmarks.md; the trainer's and the libraries' lines go to the log file the
header names. Duration: a run takes 20-25 CPU seconds at 300 steps for the baseline
and 30-35 for the recipe (TensorFlow's start, the steps, one evaluation, the export), ~330
CPU seconds for the 12 runs: about 5 minutes on 2 idle cores, 15-20 minutes when other
jobs load the 2 cores 5-7 times over (the seconds per run, wall and CPU, are in the table).
"""
import contextlib
import datetime
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from bench import cli
from common import console
from preprocess import demo_data
from trainer.settings import checks, flags as trainer_settings, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("baseline", "recipe")
QUICK_SEEDS, QUICK_STEPS = "1", 100  # --quick: one run per engine and recipe
# The recipe at timm's and Model Garden's values, except mixup (0.2, not their 0.8:
# ~100 training images leave little to blend against); AdamW's decay replaces Adam's L2.
RECIPE_FLAGS = ("--augment randaugment --mixup_alpha 0.2 --cutmix_alpha 1.0 "
                "--optimizer adamw --weight_decay 0.05")


def build_parser():
    parser = cli.make_parser("bench_recipe", __doc__, f"seed {QUICK_SEEDS}, {QUICK_STEPS} steps")
    parser.add_argument("--steps", type=int, default=300,
                        help="training steps of every run (both recipes: the same budget)")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated --seed values, each >= 1")
    parser.add_argument("--engines", default=",".join(table.ENGINES),
                        help=f"comma-separated, of {', '.join(table.ENGINES)}")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help=f"comma-separated, of {', '.join(RECIPES)}")
    parser.add_argument("--train_per_label", type=int, default=10,
                        help="training images per digit (the first ones of the demo's train split)")
    parser.add_argument("--batch_size", type=int, default=32, help="--train_batch_size of every run")
    parser.add_argument("--recipe_flags", default=RECIPE_FLAGS,
                        help="trainer flags the recipe adds to the baseline's")
    parser.add_argument("--work_dir", default=None,
                        help="keep the data and runs here (default: a temporary directory, removed)")
    return parser


def parse_args(argv=None):
    """The flags, checked: a mistake is one line and exit code 2 before anything is written."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = QUICK_SEEDS, QUICK_STEPS
    for name in ("steps", "train_per_label", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be at least 1")
    args.seeds = parse_seeds(parser, args.seeds)
    args.engines = parse_engines(parser, args.engines)
    args.recipes = parse_names(parser, "recipes", args.recipes, RECIPES)
    args.recipe_flags = shlex.split(args.recipe_flags)
    problem = recipe_flags_problem(args)
    if problem:
        parser.error(problem)
    return args


def parse_seeds(parser, text):
    """'1,2,3' -> [1, 2, 3]; 0 is the trainer's 'unseeded', which no one could repeat."""
    try:
        seeds = [int(seed) for seed in text.split(",")]
    except ValueError:
        parser.error(f"--seeds={text!r} must be comma-separated integers, e.g. 1,2,3")
    if not seeds or min(seeds) < 1 or len(set(seeds)) != len(seeds):
        parser.error(f"--seeds={text!r} must be distinct integers >= 1 (0 is unseeded)")
    return seeds


def parse_names(parser, flag, text, choices):
    """'a,b' -> ['a', 'b'], each one of choices, none twice."""
    names = text.split(",")
    if any(name not in choices for name in names) or len(set(names)) != len(names):
        parser.error(f"--{flag}={text!r} must be distinct names of {', '.join(choices)}")
    return names


def parse_engines(parser, text):
    engines = parse_names(parser, "engines", text, table.ENGINES)
    if "estimator" in engines and not has_estimator():
        parser.error("--engines estimator needs tensorflow-estimator, which this Python does not "
                     "have (.venv-keras): use --engines keras, or run it with .venv/bin/python")
    return engines


def has_estimator():
    import importlib.util
    return importlib.util.find_spec("tensorflow_estimator") is not None


def recipe_flags_problem(args):
    """None, or the trainer's own objection to the recipe's settings (its table's checks, which
    need no TensorFlow), so that a bad recipe stops before the first training, not after it."""
    # A flag it does not know: one line with the closest setting's flag, exit code 2 (console)
    typed = vars(trainer_settings.make_parser().parse_args(args.recipe_flags))
    unknown = [f"--{name}" for name in typed if name not in table.SETTINGS]  # --config, -v
    if unknown:
        return (f"--recipe_flags: {' '.join(unknown)} is not a trainer setting "
                f"(python -m trainer.task --help lists them)")
    if not typed:
        return "--recipe_flags is empty: give the trainer flags the recipe adds to the baseline"
    typed = dict(typed, train_steps=args.steps, train_batch_size=args.batch_size,
                 seed=max(args.seeds), output_dir="unused")
    try:
        params = {name: checks.coerce(name, value, "--recipe_flags") for name, value in typed.items()}
        checks.check_params(dict(table.DEFAULTS, **params), dict.fromkeys(params, "--recipe_flags"))
    except checks.ConfigError as err:
        return str(err)
    return None


def first_per_label(lines, count):
    """The first count 'uri,label' lines of each label, in their order."""
    kept, seen = [], {}
    for line in lines:
        label = line.rstrip("\n").rsplit(",", 1)[1]
        seen[label] = seen.get(label, 0) + 1
        if seen[label] <= count:
            kept.append(line)
    return kept


def make_dataset(work_dir, train_per_label, log):
    """The demo digits' JPEGs, a train CSV of train_per_label per digit, both splits as
    TFRecords by the real preprocessing command; returns (records dir, {split: records})."""
    images = os.path.join(work_dir, "images")
    demo_data.build_demo_data(images)
    with open(os.path.join(images, "train.csv")) as f:
        train = first_per_label(f.readlines(), train_per_label)
    with open(os.path.join(work_dir, "train_subset.csv"), "w") as f:
        f.writelines(train)
    with open(os.path.join(images, "eval.csv")) as f:
        held_out = sum(1 for line in f if line.strip())
    records = os.path.join(work_dir, "tfrecords")
    run_command(["-m", "preprocess.jpeg_to_tfrecord",
                 "--input_csv", f"train={work_dir}/train_subset.csv",
                 "--input_csv", f"eval={images}/eval.csv", "--output_dir", records], log)
    return records, {"train": len(train), "eval": held_out}


def run_command(args, log):
    """python args..., from the repo root, output appended to the log; returns its CPU seconds
    (user + system: steadier than wall time on a shared machine); raises on failure."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    log.write(f"\n$ {shlex.join(['python', *args])}\n")
    log.flush()
    before = children_cpu_seconds()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=log,
                          stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(args[:2])} failed (exit code {done.returncode}): "
                           f"see {log.name}")
    return children_cpu_seconds() - before


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def trainer_flags(records, run_dir, engine, recipe, seed, args):
    """The trainer's command line of one run: the same budget for both recipes."""
    flags = ["-m", "trainer.task", "--engine", engine, "--seed", str(seed),
             "--train_data_path", f"{records}/train-*", "--eval_data_path", f"{records}/eval-*",
             "--output_dir", run_dir, "--train_steps", str(args.steps),
             "--steps_per_eval", str(args.steps), "--train_batch_size", str(args.batch_size)]
    return flags + (args.recipe_flags if recipe == "recipe" else [])


def final_accuracy(run_dir, steps):
    """The held-out accuracy of the run's evaluation at its last step."""
    from trainer.run import eval_records
    records = eval_records.read_eval_results(run_dir)
    if not records or records[-1]["global_step"] != steps:
        raise RuntimeError(f"{run_dir}: no evaluation at step {steps} in {eval_records.RESULTS_FILE}")
    return records[-1]["accuracy"]


def train_all(records, work_dir, args, log):
    """{(engine, recipe): [(accuracy, wall seconds, CPU seconds) per seed]}, seeds alternating
    between recipes so that the machine's load falls on both alike."""
    results = {(engine, recipe): [] for engine in args.engines for recipe in args.recipes}
    total = len(results) * len(args.seeds)
    for seed in args.seeds:
        for engine in args.engines:
            for recipe in args.recipes:
                run_dir = os.path.join(work_dir, "runs", f"{engine}-{recipe}-seed{seed}-steps{args.steps}")
                start = time.perf_counter()
                cpu = run_command(trainer_flags(records, run_dir, engine, recipe, seed, args), log)
                seconds = time.perf_counter() - start
                accuracy = final_accuracy(run_dir, args.steps)
                results[engine, recipe].append((accuracy, seconds, cpu))
                done = sum(len(runs) for runs in results.values())
                print(f"[{done}/{total}] {engine} {recipe} seed {seed}: held-out accuracy "
                      f"{accuracy:.4f} ({seconds:.0f} s, {cpu:.0f} CPU s)", file=sys.stderr, flush=True)
    return results


def summarise(accuracies):
    """(mean, sample standard deviation; 0.0 for a single seed) of a list of accuracies."""
    spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    return statistics.mean(accuracies), spread


def format_table(results, seeds):
    """The markdown table of {(engine, recipe): [(accuracy, wall s, CPU s) per seed]}: one row each."""
    lines = ["| engine | recipe | " + " | ".join(f"seed {seed}" for seed in seeds)
             + " | mean ± sd | recipe − baseline | s per run (wall / CPU) |",
             "|---|---|" + "---|" * len(seeds) + "---|---|---|"]
    for (engine, recipe), runs in results.items():
        baseline = results.get((engine, "baseline")) if recipe != "baseline" else None
        lines.append(table_row(engine, recipe, runs, baseline))
    return "\n".join(lines)


def table_row(engine, recipe, runs, baseline_runs=None):
    """One row; with baseline_runs, the difference of the means (blank without)."""
    accuracies = [run[0] for run in runs]
    mean, spread = summarise(accuracies)
    difference = ""
    if baseline_runs:
        difference = f"{mean - summarise([run[0] for run in baseline_runs])[0]:+.4f}"
    wall, cpu = (statistics.mean(run[i] for run in runs) for i in (1, 2))
    return (f"| {engine} | {recipe} | " + " | ".join(f"{a:.4f}" for a in accuracies)
            + f" | {mean:.4f} ± {spread:.4f} | {difference} | {wall:.0f} / {cpu:.0f} |")


def header(args, counts, log_path):
    """What was compared, and how, above the table."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    return (f"{now}; {os.cpu_count()} cores, load {load} (1/5/15 min) before the runs; "
            f"library lines: {log_path}\n\n"
            f"{table.DEFAULTS['model']}, {demo_data.IMAGE_SIZE} px demo digits: {counts['train']} training images "
            f"({args.train_per_label} per digit), {counts['eval']} held out (the demo's eval split); "
            f"{args.steps} steps at batch {args.batch_size}, the table's learning rate and schedule, "
            f"for both recipes; seeds {', '.join(map(str, args.seeds))}.\n"
            f"baseline = trainer/settings/table.py's defaults; recipe = the same plus "
            f"`{shlex.join(args.recipe_flags)}`. Held-out accuracy at the last step:")


@contextlib.contextmanager
def work_directory(work_dir):
    """--work_dir (kept), else a temporary directory removed at the end."""
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
        yield os.path.abspath(work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_recipe-") as directory:
            yield directory


def run(argv=None):
    args = parse_args(argv)
    console.quiet_unless_verbose([])  # before TensorFlow loads here (final_accuracy)
    log_path = cli.log_path(args, "bench_recipe")
    print(f"bench_recipe: the trainer's and libraries' lines go to {log_path}", file=sys.stderr)
    with work_directory(args.work_dir) as work_dir, open(log_path, "a") as log:
        records, counts = make_dataset(work_dir, args.train_per_label, log)
        top = header(args, counts, log_path)
        results = train_all(records, work_dir, args, log)
    print(f"\n### Small-data recipe\n\n{top}\n\n{format_table(results, args.seeds)}", flush=True)
    return results


def main(argv=None):
    try:
        run(argv)
    except RuntimeError as err:  # a failed subprocess: its output is in the log
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main(sys.argv[1:])
