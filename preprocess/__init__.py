"""Preprocessing package: the Beam JPEG -> TFRecord pipeline."""
