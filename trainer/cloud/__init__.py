"""Cluster and cloud plumbing below the engines: TF_CONFIG, hyperparameter-tuning trials."""
