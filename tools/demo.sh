#!/usr/bin/env bash
# The whole job end to end on the bundled demo data (UCI digits from scikit-learn):
#   make demo            (or: bash tools/demo.sh work/demo)
# Each stage writes under WORK; re-running resumes or skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-work/demo}
PY=.venv/bin/python

echo "== 1/4 demo images: JPEGs in label folders + train.csv/eval.csv under $WORK/images"
$PY -m preprocess.demo_data --output_dir "$WORK/images"

echo "== 2/4 Beam pipeline: JPEG -> sharded TFRecords under $WORK/tfrecords"
$PY -m preprocess.jpeg_to_tfrecord \
  --input_csv "train=$WORK/images/train.csv" \
  --input_csv "eval=$WORK/images/eval.csv" \
  --output_dir "$WORK/tfrecords"

echo "== 3/4 train, evaluate and export with TPUEstimator (CPU) under $WORK/run"
$PY -m trainer.task \
  --train_data_path "$WORK/tfrecords/train-*" \
  --eval_data_path "$WORK/tfrecords/eval-*" \
  --output_dir "$WORK/run" \
  --progress_seconds 45  # the whole demo fits one screen (40 lines) even on a busy machine

echo "== 4/4 serve the export on CPU, classify held-out JPEGs with the client, stop the server"
# On free ports serving.demo picks and prints: never 8500/8501, which a running TF Serving
# or a second checkout's demo may hold.
mapfile -t HELD_OUT < <(head -n 6 "$WORK/images/eval.csv" | cut -d, -f1)
$PY -m serving.demo --model_base_path "$WORK/run/export/image_classifier" \
  --labels "$WORK/tfrecords/labels.txt" "${HELD_OUT[@]}"

echo "== done: JPEGs $WORK/images -> TFRecords $WORK/tfrecords -> run and exports $WORK/run;"
echo "   served and classified ${#HELD_OUT[@]} held-out JPEGs. Look: tensorboard --logdir $WORK/run"
