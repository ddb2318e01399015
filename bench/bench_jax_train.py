"""Benchmark: the JAX engine's training steps/s against the Keras engine's, same network, batch and cached batches.

    .venv-jax/bin/python -m bench.bench_jax_train            # from the repo root; ~12 minutes on 2 cores
    .venv-jax/bin/python -m bench.bench_jax_train --quick    # 2 rounds of 30 steps
    .venv-jax/bin/python -m bench.bench_jax_train --models small_cnn --rounds 2 --steps 40

Both engines train the identical network (trainer.nets with trainer/settings/table.py's
defaults: tf-keras for the Keras engine, Keras 3 for the JAX engine) with the same
objective at the same batch, in this process, on the same input: trainer.data.input's
TRAIN input_fn with its first batches cached (bench/train_timing.py), so both measure the
training step rather than JPEG decoding. The Keras engine runs its train function
(iterations_per_loop steps per call, bench/train_timing.py run_keras); the JAX engine its
jitted step (trainer/jax/model.py) on the batches as trainer/jax/data.py hands them over,
both timed after the same warm-up steps. Rounds alternate on the shared machine and each
ratio compares runs of the same round; CPU seconds per step (all threads) beside it.
Goal: JAX engine >= 1.0 x Keras engine by steps/s (the median of per-round ratios).

Where the JAX engine is slower on CPU, the kernels say why: the gradient of each of
small_cnn's convolutions and 2x2 max pools at its shapes, timed alone in XLA:CPU (jax.grad)
and in TensorFlow (GradientTape, its oneDNN/Eigen kernels), printed as notes.

The images are random 32x32 JPEGs in 10 classes (this environment has no scikit-learn
digits; the step's cost does not depend on what the pixels show).
"""
import statistics
import tempfile
import time

from bench import cli, report as report_lib

GOAL_JAX_VS_KERAS = 1.0


def parse_args(argv=None):
    parser = cli.make_parser("bench_jax_train", __doc__, "2 rounds of 30 steps")
    parser.add_argument("--models", default="small_cnn,resnet", help="comma-separated nets (Keras 3 ones)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per model")
    parser.add_argument("--steps", type=int, default=60, help="timed training steps per run")
    parser.add_argument("--examples", type=int, default=512, help="random JPEGs written")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 2, 30
    return args


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow and JAX load
    cli.answer_flags_first(parse_args)


import io  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from bench.train_timing import WARMUP_STEPS, make_cached_input_fn, run_keras, write_splits  # noqa: E402
from trainer import chain  # noqa: E402
from trainer.jax import data as jax_data, model as jax_model  # noqa: E402

LABELS = [str(i) for i in range(10)]


def random_jpegs(count, size=32):
    """(jpeg bytes, label) of count random images, seeded: the same set every run."""
    rng = np.random.default_rng(0)
    examples = []
    for i in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buffer, "JPEG")
        examples.append((buffer.getvalue(), i % len(LABELS)))
    return examples


def run_jax(params, input_fn, steps):
    """(steps per wall second, CPU seconds per step) of the JAX engine's jitted step, timed after
    the same warm-up steps as the Keras engine's (its compilation among them)."""
    sharding = jax_data.batch_sharding(jax_data.make_distribution())
    model = jax_model.JaxModel(params)
    state = jax_data.replicated(model.initial_state(), sharding)
    step = jax.jit(model.train_step, donate_argnums=0)
    batches = jax_data.global_batches(input_fn(dict(params, batch_size=params["train_batch_size"])), sharding)
    for _ in range(WARMUP_STEPS):
        state, logs = step(state, *next(batches))
    float(logs["loss"])
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        state, logs = step(state, *next(batches))
    float(logs["loss"])  # waits for the last step
    return steps / (time.perf_counter() - wall), (time.process_time() - cpu) / steps


def time_calls(function, *args, calls=30):
    """Wall milliseconds per call of function(*args) (NumPy results), after one warm-up call."""
    [np.asarray(value) for value in function(*args)]
    start = time.perf_counter()
    for _ in range(calls):
        [np.asarray(value) for value in function(*args)]
    return 1e3 * (time.perf_counter() - start) / calls


def kernel_notes(batch):
    """One note per kernel of small_cnn (3x3 convolutions, 2x2 max pools at its two blocks):
    the gradient's milliseconds in XLA:CPU and in TensorFlow, alone."""
    def conv(x, w, lax):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) \
            if lax else tf.nn.conv2d(x, w, 1, "SAME")

    def pool(x, lax):
        return jax.lax.reduce_window(x, -np.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") \
            if lax else tf.nn.max_pool2d(x, 2, 2, "VALID")
    rng, notes = np.random.default_rng(0), []
    for size, channels, filters in ((32, 3, 32), (16, 32, 64)):
        x = rng.random((batch, size, size, channels), np.float32)
        w = rng.random((3, 3, channels, filters), np.float32)
        y = rng.random((batch, size, size, filters), np.float32)
        kernels = {f"conv {size}px {channels}->{filters}": (lambda x, w: jnp_sum_square(conv(x, w, True)), (x, w),
                                                             lambda x, w: conv(x, w, False)),
                   f"max pool {size}px x{filters}": (lambda y: jnp_sum_square(pool(y, True)), (y,),
                                                      lambda y: pool(y, False))}
        for name, (jax_loss, args, tf_forward) in kernels.items():
            jax_ms = time_calls(jax.jit(jax.grad(jax_loss, argnums=tuple(range(len(args))))), *args)
            tf_ms = time_calls(tf_gradient(tf_forward), *[tf.constant(a) for a in args])
            notes.append(f"kernel: {name}, gradient at batch {batch}: XLA:CPU {jax_ms:.1f} ms, TensorFlow "
                         f"{tf_ms:.1f} ms ({tf_ms / jax_ms:.2f}x)")
    return notes


def jnp_sum_square(values):
    return (values * values).sum()


def tf_gradient(forward):
    @tf.function
    def gradient(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = tf.reduce_sum(tf.square(forward(*args)))
        return tape.gradient(loss, args)
    return gradient


def bench_model(params, input_fn, rounds, steps):
    rows = []
    for _ in range(rounds):
        keras, keras_cpu = run_keras(params, input_fn, steps)
        jax_rate, jax_cpu = run_jax(params, input_fn, steps)
        rows.append({"keras": keras, "jax": jax_rate, "keras_cpu": keras_cpu, "jax_cpu": jax_cpu})
    return rows


def ratios(rows):
    return [row["jax"] / row["keras"] for row in rows]


def speed_row(name, params, rows):
    median = lambda key: statistics.median(row[key] for row in rows)  # noqa: E731
    return [name, params["image_size"], params["train_batch_size"], f"{median('keras'):.2f}",
            f"{median('jax'):.2f}", report_lib.ratio_figure(ratios(rows)),
            f"{1e3 * median('keras_cpu'):.0f} / {1e3 * median('jax_cpu'):.0f}",
            report_lib.ratio_figure(row["keras_cpu"] / row["jax_cpu"] for row in rows)]


def measure(args):
    speeds = {}
    with tempfile.TemporaryDirectory() as directory:
        write_splits(directory, {"train": random_jpegs(args.examples)}, LABELS)
        pattern = f"{directory}/train-*"
        input_fn = make_cached_input_fn(pattern)
        for name in filter(None, args.models.split(",")):
            params = chain.resolve({"train_data_path": pattern, "eval_data_path": pattern, "output_dir": directory,
                                    "model": name, "engine": "jax"})
            speeds[name] = (params, bench_model(params, input_fn, args.rounds, args.steps))
    return speeds


def run(argv=None):
    args = parse_args(argv)
    log_path = cli.log_path(args, "bench_jax_train")
    header = (f"{report_lib.machine_line()}; TensorFlow {tf.__version__}, JAX {jax.__version__} "
              f"({jax.default_backend()}); {args.rounds} rounds x {args.steps} steps ({WARMUP_STEPS} "
              f"warm-up steps not timed); library lines: {log_path}")
    with report_lib.libraries_to_log(log_path):
        speeds = measure(args)
        kernels = kernel_notes(64) if "small_cnn" in speeds else []
    goals = [report_lib.goal_line(f"{name}: JAX engine / Keras engine, steps/s", ratios(rows), GOAL_JAX_VS_KERAS)
             for name, (_, rows) in speeds.items()]
    figures = ", ".join(f"{name} {report_lib.ratio_figure(ratios(rows))}" for name, (_, rows) in speeds.items())
    notes = [f"docs row: | training | JAX engine >= {GOAL_JAX_VS_KERAS:.1f}x the Keras engine (steps/s) | "
             f"{figures} | `.venv-jax/bin/python -m bench.bench_jax_train` |"] + kernels
    report_lib.print_report(
        None, "bench_jax_train: training steps/s, JAX engine against Keras engine", header,
        ["model", "px", "batch", "Keras steps/s", "JAX steps/s", "JAX / Keras, steps/s",
         "CPU ms/step, Keras / JAX", "JAX / Keras, by CPU per step"],
        [speed_row(name, params, rows) for name, (params, rows) in speeds.items()], goals, notes)
    return speeds


if __name__ == "__main__":
    run()
