"""Serving package: SavedModel export helpers, TF Serving launcher, client."""
