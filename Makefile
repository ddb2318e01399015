# Two commands do everything on a fresh clone (each builds .venv from the lock if needed):
#   make demo   - the whole job end to end on the bundled demo data
#   make test   - the test suite
# The second environment (current TensorFlow, no tensorflow-estimator; docs/migration.md):
#   make test-keras - builds .venv-keras from requirements-keras.lock if needed, runs its suite
# The third (Keras 3 on JAX, --engine jax):
#   make test-jax - builds .venv-jax from requirements-jax.lock if needed, runs its suite
VENV := .venv
PY := $(VENV)/bin/python
VENV_KERAS := .venv-keras
PY_KERAS := $(VENV_KERAS)/bin/python
PY_JAX := .venv-jax/bin/python
VENV_KERAS_TPU := .venv-keras-tpu
VENV_JAX := .venv-jax
VENV_JAX_TPU := .venv-jax-tpu
WORK ?= work/demo
# Python writes the bytecode of what it imports, even where the shell says not to: a venv built
# without it (CI's: COMPILE_BYTECODE=no, tools/install_venv.sh) then compiles TensorFlow once,
# not in every process (17 s of CPU per import instead of 6).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv venv-keras venv-keras-tpu venv-jax venv-jax-tpu check-tpu-build check-jax-tpu-build test test-fast test-keras test-jax demo bench bench-quick lock lock-keras lock-keras-tpu lock-jax lock-jax-tpu clean

# Rebuilt only when the lock file changes (install_venv.sh: in a temporary directory,
# renamed into place once the install succeeded).
$(VENV)/.installed: requirements.lock
	bash tools/install_venv.sh

# tf.keras is tf-keras (Keras 2) in this venv: docs/migration.md, "The second environment".
$(VENV_KERAS)/.installed: requirements-keras.lock
	VENV=$(VENV_KERAS) LOCK=requirements-keras.lock VENV_ENV=TF_USE_LEGACY_KERAS=1 \
	  bash tools/install_venv.sh

# The same environment with TensorFlow's TPU build and its libtpu (Dockerfile.keras, TPU VMs).
$(VENV_KERAS_TPU)/.installed: requirements-keras-tpu.lock
	VENV=$(VENV_KERAS_TPU) LOCK=requirements-keras-tpu.lock VENV_ENV=TF_USE_LEGACY_KERAS=1 \
	  bash tools/install_venv.sh

# The third environment: Keras 3 on JAX (--engine jax), TensorFlow's CPU build for tf.data and
# the export; tf.keras is tf-keras there too (the export's Keras 2 twin): docs/migration.md.
$(VENV_JAX)/.installed: requirements-jax.lock
	VENV=$(VENV_JAX) LOCK=requirements-jax.lock VENV_ENV="KERAS_BACKEND=jax TF_USE_LEGACY_KERAS=1" \
	  bash tools/install_venv.sh

# The same with jax[tpu]'s libtpu (a v5e, v5p, v6e or TPU7x VM).
$(VENV_JAX_TPU)/.installed: requirements-jax-tpu.lock
	VENV=$(VENV_JAX_TPU) LOCK=requirements-jax-tpu.lock VENV_ENV="KERAS_BACKEND=jax TF_USE_LEGACY_KERAS=1" \
	  bash tools/install_venv.sh

venv: $(VENV)/.installed

venv-keras: $(VENV_KERAS)/.installed

venv-keras-tpu: $(VENV_KERAS_TPU)/.installed

venv-jax: $(VENV_JAX)/.installed

venv-jax-tpu: $(VENV_JAX_TPU)/.installed

# The TPU lock installs and TensorFlow imports from it, libtpu loaded, without aborting, on a
# machine without a TPU: TPU_SKIP_MDS_QUERY=1 spares libtpu minutes of asking the GCE metadata
# server for a TPU's topology (trainer/cloud/libtpu_pair.py; docs/cloud.md).
check-tpu-build: $(VENV_KERAS_TPU)/.installed
	TPU_SKIP_MDS_QUERY=1 $(VENV_KERAS_TPU)/bin/python -m trainer.cloud.libtpu_pair --import

# The JAX TPU lock installs and JAX imports from it with libtpu present, on a machine without a
# TPU: one line says it runs on CPU (trainer/cloud/jax_tpu.py; docs/cloud.md).
check-jax-tpu-build: $(VENV_JAX_TPU)/.installed
	TPU_SKIP_MDS_QUERY=1 $(VENV_JAX_TPU)/bin/python -m trainer.cloud.jax_tpu

# Two pytest-xdist workers, one test file each at a time (--dist loadfile: a module's fixtures
# are set up once): the suite is mostly one core's work, and CI has two (docs/development.md).
# `make test PYTEST_WORKERS=` runs it in one process. A worker that dies (a crash, or
# pytest-timeout ending a hung test) fails its test and is not replaced: xdist would run the
# dead worker's whole file again on a new one, and a hang again and again. The files are handed
# out longest first (tests/conftest.py's order; xdist's own would put files of few tests last).
PYTEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart 0

test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_WORKERS)

# The inner loop: no child process, no training, nothing slow (pytest.ini's marks; a test that
# starts a process or trains without its mark fails here, tests/conftest.py). Under 3 minutes.
test-fast: $(VENV)/.installed
	TESTS_FAST_ONLY=1 $(PY) -m pytest $(PYTEST_WORKERS) -m "not process and not trains and not slow"

# The tests whose subject depends on TensorFlow 2.20 or on the Estimator's absence, each with
# its reason (tests/keras_env.txt); a test among them that needs the Estimator is skipped there,
# saying why (tests/engines.py).
test-keras: $(VENV_KERAS)/.installed
	$(PY_KERAS) -m pytest $(PYTEST_WORKERS) $$(sed -e 's/#.*//' tests/keras_env.txt)

# The JAX engine's tests and the shared tests that take it (tests/jax_env.txt; -k jax picks
# the latter's jax cases); .venv is needed beside it for the export served by TensorFlow 2.15.
test-jax: $(VENV_JAX)/.installed $(VENV)/.installed
	$(PY_JAX) -m pytest $(PYTEST_WORKERS) -k "jax or cross_version" $$(sed -e 's/#.*//' tests/jax_env.txt)

demo: $(VENV)/.installed
	bash tools/demo.sh $(WORK)

# Every benchmark with its defaults (~29 minutes on 2 cores, 1,693 s on 2026-11-27; one table each,
# docs/benchmarks.md); bench-quick: each with --quick (~9 minutes, a first look).
# Each script's time follows its table, to hold against the duration its docstring announces.
bench-quick: BENCH_ARGS = --quick
bench bench-quick: $(VENV)/.installed $(VENV_JAX)/.installed
	for b in bench/bench_*.py; do start=$$(date +%s); py=$(PY); case $$b in *jax*) py=$(PY_JAX);; esac; \
	  $$py -m bench.$$(basename $$b .py) $(BENCH_ARGS) || exit 1; \
	  echo "make $@: $$b took $$(( $$(date +%s) - start )) s"; done

# Re-resolve requirements.lock from setup.py + requirements.in (needs uv on PATH).
lock:
	uv pip compile requirements.in --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes \
	  --no-emit-package tpu-image-classifier -o requirements.lock

# Re-resolve requirements-keras.lock from requirements-keras.in (needs uv on PATH).
lock-keras:
	uv pip compile requirements-keras.in --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes -o requirements-keras.lock

# Re-resolve requirements-keras-tpu.lock against requirements-keras.lock (needs uv on PATH).
# libtpu's wheels are manylinux_2_31 (glibc 2.31: TPU VMs' Ubuntu 22.04, Dockerfile.keras' Debian 12).
lock-keras-tpu:
	uv pip compile requirements-keras-tpu.in -c requirements-keras.lock --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_31 --generate-hashes --no-emit-package tensorflow \
	  -o requirements-keras-tpu.lock

# Re-resolve requirements-jax.lock against requirements-keras.lock (-c: the packages both
# environments share keep one version) without tensorflow itself, which tf-keras and
# tensorflow-serving-api require and tensorflow-cpu provides (needs uv on PATH).
lock-jax:
	uv pip compile requirements-jax.in -c requirements-keras.lock --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes --no-emit-package tensorflow \
	  -o requirements-jax.lock

# Re-resolve requirements-jax-tpu.lock against requirements-jax.lock; libtpu is manylinux_2_31.
lock-jax-tpu:
	uv pip compile requirements-jax-tpu.in -c requirements-jax.lock --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_31 --generate-hashes --no-emit-package tensorflow \
	  -o requirements-jax-tpu.lock

clean:
	rm -rf work .pytest_cache
