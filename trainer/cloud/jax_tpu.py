"""JAX's TPU build and its libtpu, checked: JAX imports beside libtpu and says in one line where it runs.

`jax[tpu]==0.10.2` pins libtpu to the release its jaxlib was built with (0.0.42.*, written in
JAX's setup.py; requirements-jax-tpu.lock holds the pair, tests/cloud/test_tpu_lock.py holds
the lock to LIBTPU_FOR_JAX). On a machine without a TPU, JAX falls back to its CPU backend
after a warning; this says so in one line. The import and the device query run in a child
process with a time limit, so a libtpu that aborts or waits on a TPU cannot take this process
with it (TPU_SKIP_MDS_QUERY=1 spares libtpu's questions to the GCE metadata server off GCE).

    TPU_SKIP_MDS_QUERY=1 .venv-jax-tpu/bin/python -m trainer.cloud.jax_tpu
"""
import argparse
import sys

from trainer.cloud.libtpu_pair import installed_version, time_child

# jax version -> the libtpu release series its [tpu] extra pins (requirements-jax-tpu.in).
LIBTPU_FOR_JAX = {"0.10.2": "0.0.42"}
JAX_TPU_LOCK = "requirements-jax-tpu.lock"
DEVICES = ("import jax; devices = jax.devices(); "
           "print(jax.__version__, jax.default_backend(), len(devices), devices[0].device_kind, sep='|')")


def pair_problem(jax_version, libtpu):
    """The one-line problem with libtpu libtpu beside jax jax_version, or None (no libtpu: the CPU build)."""
    wanted = LIBTPU_FOR_JAX.get(jax_version)
    if libtpu is None or wanted is None or libtpu == wanted or libtpu.startswith(wanted + "."):
        return None
    return (f"jax {jax_version} runs with libtpu {wanted}.* ({JAX_TPU_LOCK}), but libtpu {libtpu} is "
            f"installed: install the lock (pip install --no-deps --require-hashes -r {JAX_TPU_LOCK})")


def describe_devices(backend, count, kind):
    """Where JAX runs, for a person."""
    if backend == "tpu":
        return f"JAX runs on {count} TPU device{'s' * (count != 1)} ({kind})"
    return f"no TPU here, so JAX runs on {backend.upper()} ({count} device{'s' * (count != 1)})"


def main(argv=None):
    argparse.ArgumentParser(prog="python -m trainer.cloud.jax_tpu",
                            description=__doc__.split("\n\n")[0]).parse_args(argv)
    jax_version, libtpu = installed_version("jax"), installed_version("libtpu")
    problem = pair_problem(jax_version, libtpu)
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        return 2
    installed = f"jax {jax_version} with libtpu {libtpu}" if libtpu else f"jax {jax_version} (no libtpu)"
    try:
        seconds, answer = time_child(DEVICES, "import jax and list its devices")
    except RuntimeError as err:
        print(f"error: {installed}, but {err}", file=sys.stderr, flush=True)
        return 1
    _, backend, count, kind = answer.split("|")
    print(f"{installed}: {describe_devices(backend, int(count), kind)}; the import and device "
          f"query took {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
