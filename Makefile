# Two commands do everything on a fresh clone (each builds .venv from the lock if needed):
#   make demo   - the whole job end to end on the bundled demo data
#   make test   - the test suite
VENV := .venv
PY := $(VENV)/bin/python
WORK ?= work/demo

.PHONY: venv test demo bench lock clean

# Rebuilt only when the lock file changes.
$(VENV)/.installed: requirements.lock
	bash tools/install_venv.sh

venv: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest

demo: $(VENV)/.installed
	bash tools/demo.sh $(WORK)

bench: $(VENV)/.installed
	for b in bench/bench_*.py; do $(PY) -m bench.$$(basename $$b .py) || exit 1; done

# Re-resolve requirements.lock from setup.py + requirements.in (needs uv on PATH).
lock:
	uv pip compile requirements.in --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes \
	  --no-emit-package tpu-image-classifier -o requirements.lock

clean:
	rm -rf work .pytest_cache
