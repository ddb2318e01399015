"""The trainer: TFRecords -> checkpoints -> SavedModel, with either engine (TPUEstimator or Keras TPUStrategy).

Its rooms, from the lowest up (each imports only rooms below it; tests/common/test_architecture.py
holds it, docs/development.md#layout-rules says why): settings/; objective/, data/, export/,
cloud/; nets/; run/ (the run directory's contract); chain.py (flags -> params); estimator/,
keras/ (the engines) and report/; task.py, the entry point.

    .venv/bin/python -m trainer.task --help
"""
