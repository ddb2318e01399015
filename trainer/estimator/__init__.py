"""The TPUEstimator engine: model_fn, the train/evaluate loop, export, predict, warm start."""
