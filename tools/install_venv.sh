#!/usr/bin/env bash
# Create .venv from requirements.lock with no dependency resolution.
#   bash tools/install_venv.sh            # uses uv when it is on PATH, else pip
#   INSTALLER=pip bash tools/install_venv.sh
# Every package (and every hash) comes from requirements.lock; nothing is resolved.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
INSTALLER=${INSTALLER:-$(command -v uv >/dev/null 2>&1 && echo uv || echo pip)}

echo "install: creating $VENV with $PYTHON using $INSTALLER" >&2
rm -rf "$VENV"
if [ "$INSTALLER" = uv ]; then
  uv venv -q "$VENV" --python "$PYTHON"
  uv pip sync -q --python "$VENV/bin/python" --require-hashes requirements.lock
else
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes -r requirements.lock
fi
# The project itself runs from the checkout (python -m ...); a .pth file makes it
# importable from any working directory (gcloud local train, subprocess tests)
# without an editable install that would need a build step.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pwd > "$site/tpu_image_classifier.pth"
cp requirements.lock "$VENV/.installed"
echo "install: done ($("$VENV/bin/python" -c 'import tensorflow as tf; print("tensorflow", tf.__version__)' 2>/dev/null))" >&2
