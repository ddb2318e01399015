"""Trainer package: TPUEstimator input_fn, model_fn, train/evaluate loop."""
