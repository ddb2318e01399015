"""RunInference measures its memory without a warning in either environment (Beam 2.77 in
.venv-keras lost the `resource` module when torch is absent; serving/batch_transforms.py).

    .venv-keras/bin/python -m pytest tests/serving/test_beam_inference_memory.py
"""
import logging

from apache_beam.ml.inference import base as inference_base

from serving import batch_transforms  # noqa: F401  (what batch prediction imports)


def test_runinference_reads_its_memory_and_warns_nothing(caplog):
    with caplog.at_level(logging.WARNING):
        used = inference_base._get_current_process_memory_in_bytes()  # what RunInference calls
    assert used > 10 * 2**20  # this process holds Beam and TensorFlow: well over 10 MB
    assert not [r for r in caplog.records if "Resource module" in r.getMessage()]
