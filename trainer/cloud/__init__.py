"""Cluster and TPU plumbing: TF_CONFIG roles, hyperparameter-tuning trials."""
