"""Cluster and cloud plumbing below the engines: the TPU and its libtpu, XLA readiness checks, TF_CONFIG, hyperparameter-tuning trials."""
