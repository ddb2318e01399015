#!/usr/bin/env bash
# Build a venv from a lock file with no dependency resolution.
#   bash tools/install_venv.sh                   # .venv from requirements.lock with uv (see UV below)
#   VENV=.venv-keras LOCK=requirements-keras.lock VENV_ENV=TF_USE_LEGACY_KERAS=1 \
#       bash tools/install_venv.sh               # the second environment (make venv-keras)
#   INSTALLER=pip bash tools/install_venv.sh
# Every package (and every hash) comes from LOCK; nothing is resolved.
# VENV/.installed is a copy of the lock it was built from: when it equals LOCK byte for
# byte, nothing is done. Otherwise the new venv is built in a temporary sibling directory
# and renamed into place only once its install has succeeded, so a failed or interrupted
# install never touches a working VENV; only that temporary directory is deleted.
# UV: uv on PATH when there is one; else .venv-uv/bin/uv, installed once by pip from
# requirements-uv.lock (pinned with its hashes); if that install fails, pip builds the venv
# (minutes instead of seconds) and says so. INSTALLER=pip forces pip.
# VENV_ENV: NAME=VALUE pairs (space-separated) that every Python of the venv starts with
# (a .pth file; os.environ.setdefault, so a value set by the caller wins).
# COMPILE_BYTECODE=no: no .pyc files at install (a venv imported once, as CI's TPU checks do:
# 3 s instead of 60 for the Keras TPU lock; its one import then compiles what it imports).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
LOCK=${LOCK:-requirements.lock}
VENV_ENV=${VENV_ENV:-}
COMPILE_BYTECODE=${COMPILE_BYTECODE:-yes}
UV_VENV=${UV_VENV:-.venv-uv}
UV_LOCK=requirements-uv.lock

if [ ! -f "$LOCK" ]; then
  echo "install: error: lock file $LOCK not found" >&2
  exit 2
fi
if [ -f "$VENV/.installed" ] && cmp -s "$LOCK" "$VENV/.installed"; then
  touch "$VENV/.installed"  # newer than the lock again, so make stops asking
  echo "install: $VENV is already built from $LOCK" >&2
  exit 0
fi

# Prints the uv to use, installing it into UV_VENV from UV_LOCK when needed; nothing when
# neither works (then pip builds the venv).
find_uv() {
  if command -v uv >/dev/null 2>&1; then command -v uv; return; fi
  if [ -f "$UV_VENV/.installed" ] && cmp -s "$UV_LOCK" "$UV_VENV/.installed"; then
    echo "$UV_VENV/bin/uv"; return
  fi
  rm -rf "$UV_VENV"
  if "$PYTHON" -m venv "$UV_VENV" >&2 && "$UV_VENV/bin/pip" install -q --disable-pip-version-check \
      --no-deps --require-hashes -r "$UV_LOCK" >&2 && "$UV_VENV/bin/uv" --version >/dev/null; then
    cp "$UV_LOCK" "$UV_VENV/.installed"
    echo "$UV_VENV/bin/uv"
  else
    rm -rf "$UV_VENV"
    echo "install: could not install uv from $UV_LOCK; pip builds $VENV instead (minutes, not seconds)" >&2
  fi
}
if [ -z "${INSTALLER:-}" ]; then
  UV=$(find_uv)
  INSTALLER=$([ -n "$UV" ] && echo uv || echo pip)
else
  UV=$(command -v uv || true)
fi

final=$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")
build=$(mktemp -d "$final.building.XXXXXX")
trap 'rm -rf "$build"' EXIT  # the temporary build only: never $VENV
echo "install: building $VENV from $LOCK with $PYTHON using $INSTALLER (in $build)" >&2
if [ "$INSTALLER" = uv ]; then
  "$UV" venv -q --allow-existing "$build" --python "$PYTHON"
  # --compile-bytecode: pip compiles at install and uv does not; where PYTHONDONTWRITEBYTECODE is set
  # nothing else does, and every process then compiles TensorFlow again (11-13 s of CPU, not 4-5).
  compile=$([ "$COMPILE_BYTECODE" = no ] || echo --compile-bytecode)
  "$UV" pip sync -q $compile --python "$build/bin/python" --require-hashes "$LOCK"
else
  "$PYTHON" -m venv "$build"
  [ "$COMPILE_BYTECODE" != no ] || export PIP_NO_COMPILE=1  # pip's --no-compile
  "$build/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes -r "$LOCK"
fi
# The project itself runs from the checkout (python -m ...); a .pth file makes it
# importable from any working directory (gcloud local train, subprocess tests)
# without an editable install that would need a build step.
site=$("$build/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pwd > "$site/tpu_image_classifier.pth"
if [ -n "$VENV_ENV" ]; then
  for pair in $VENV_ENV; do
    printf 'import os; os.environ.setdefault(%s, %s)\n' \
      "'${pair%%=*}'" "'${pair#*=}'" >> "$site/tpu_image_classifier_env.pth"
  done
fi
# Scripts (pip, pytest, activate) name the venv by its absolute path: give them the final one.
grep -rlIF "$build" "$build/bin" "$build/pyvenv.cfg" | while read -r file; do
  sed -i "s|$build|$final|g" "$file"
done
cp "$LOCK" "$build/.installed"
# Into place: the old venv (if any) is moved aside only now, and deleted once the new one is in.
old=""
if [ -e "$VENV" ]; then
  old=$(mktemp -d "$final.old.XXXXXX")
  mv "$VENV" "$old/venv"
fi
if ! mv "$build" "$VENV"; then
  [ -z "$old" ] || mv "$old/venv" "$VENV"  # put the working venv back
  exit 1
fi
trap - EXIT
[ -z "$old" ] || rm -rf "$old"
# The installed TensorFlow by its metadata: importing it would load libtpu in the TPU build,
# which off a TPU asks the GCE metadata server for minutes.
report='from importlib import metadata
found = []
for name in ("tensorflow", "tensorflow-tpu", "tensorflow-cpu", "jax", "libtpu"):
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
print(", ".join(found) or "no tensorflow")'
echo "install: done ($("$VENV/bin/python" -c "$report"))" >&2
