"""The TPUEstimator engine: model_fn, the TPUEstimator and its answers to the driver, export, predict, a parameter-server cluster's roles, the XLA check."""
