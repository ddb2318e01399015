"""TPU readiness of --mode predict without a TPU: the predict input_fn's batches feed model_fn's
PREDICT step (use_tpu=True) compiled with XLA, every shape static, the index passed through.

    .venv/bin/python -m pytest tests/trainer/test_predict_on_tpu_path.py
"""
import numpy as np
import pytest
import tensorflow as tf

from common import signature
from trainer.settings import table
from trainer.cloud import xla
from trainer.estimator import model, predict, xla_check


@pytest.mark.parametrize("transpose_input", [False, True])
def test_predict_step_compiles_under_xla_with_static_shapes(make_jpeg, transpose_input):
    params = dict(table.DEFAULTS, use_tpu=True, image_size=16, cnn_filters=[4, 8], dense_units=16,
                  labels=["a", "b", "c"], num_classes=3, batch_size=4, transpose_input=transpose_input)
    jpegs = [make_jpeg(seed=i, height=12 + i) for i in range(6)]  # 2 batches, the last padded
    graph = tf.Graph()
    with graph.as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(
            predict.make_predict_input_fn(jpegs)(params)).get_next()

        def step(image, index):
            spec = model.model_fn({"image": image, predict.INDEX_KEY: index}, None,
                                  tf.estimator.ModeKeys.PREDICT, params)
            return [spec.predictions[signature.OUTPUT_PROBABILITIES],
                    spec.predictions[predict.INDEX_KEY]]

        outputs = tf.compat.v1.xla.experimental.compile(step, [batch["image"], batch[predict.INDEX_KEY]])
        compiled = [op for op in graph.get_operations() if xla_check.XLA_COMPILE_ATTR in op.node_def.attr]
        assert compiled and xla.dynamic_shapes(compiled) == []
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            results = [session.run(outputs) for _ in range(2)]
    assert [r[0].shape for r in results] == [(4, 3), (4, 3)]
    np.testing.assert_allclose([r[0].sum(axis=1) for r in results], 1.0, rtol=1e-5)
    assert [list(r[1]) for r in results] == [[0, 1, 2, 3], [4, 5, -1, -1]]
