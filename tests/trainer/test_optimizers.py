"""The optimizer step: AdamW's decoupled weight decay, gradient clipping by global norm, both engines.

One step of the Keras engine with a known gradient equals the AdamW update written out by
hand (and differs from Adam with the L2 term in the loss); clipping scales the whole step by
clip / global norm. Then both engines take two steps from the same weights with the same
gradients, on a network with a backbone (its own optimizer and learning rate), and end on the
same weights.

    .venv/bin/python -m pytest tests/trainer/test_optimizers.py
    .venv-keras/bin/python -m pytest tests/trainer/test_optimizers.py   # the Keras engine only
"""
import numpy as np
import pytest
import tensorflow as tf

from tests.engines import needs_estimator
from trainer import nets
from trainer.nets import applications
from trainer.objective import loss as loss_lib
from trainer.settings import table

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-8  # TF1's AdamOptimizer and Keras' Adam(W) here


def build_tiny_backbone_net(num_classes, image_size, dtype, **_):
    """A backbone (conv kernel and bias, batch-norm gamma and beta) and a head (logits)."""
    inputs = tf.keras.Input([image_size, image_size, 3])
    x = tf.keras.layers.Conv2D(2, 3, name="conv")(inputs)
    x = tf.keras.layers.BatchNormalization(name="bn")(x)
    backbone = tf.keras.Model(inputs, x, name=applications.BACKBONE)
    images = tf.keras.Input([image_size, image_size, 3], name="images")
    pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(backbone(images))
    return tf.keras.Model(images, tf.keras.layers.Dense(num_classes, name="logits")(pooled))


def build_head_only_net(num_classes, image_size, dtype, **_):
    images = tf.keras.Input([image_size, image_size, 3], name="images")
    pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(images)
    return tf.keras.Model(images, tf.keras.layers.Dense(num_classes, name="logits")(pooled))


@pytest.fixture
def tiny_nets(monkeypatch):
    for name, builder, has_backbone in (("tiny_backbone_net", build_tiny_backbone_net, True),
                                        ("head_only_net", build_head_only_net, False)):
        monkeypatch.setitem(table.NETWORKS, name, table.Network((), has_backbone=has_backbone))
        monkeypatch.setitem(nets.BUILDERS, name, builder)


def step_params(**overrides):
    """A constant rate of 0.1 unless overridden: no warm-up, the step schedule's first third."""
    return {**table.DEFAULTS, "output_dir": "unused", "num_classes": 3, "image_size": 4,
            "model": "head_only_net", "learning_rate": 0.1, "train_batch_size": 256, "warmup_steps": 0,
            "lr_schedule": "step", "train_steps": 90, **overrides}


def keras_model(params):
    from trainer.keras import model as keras_model_lib
    tf.keras.backend.clear_session()
    model = keras_model_lib.TrainingModel(nets.build_from_params(params), params, replicas=1)
    model.build_optimizers()
    return model


def first_adam_delta(gradient, learning_rate):
    """The first Adam update (slots at 0) as TF1 and Keras compute it: epsilon on sqrt(v)."""
    m, v = (1 - BETA_1) * gradient, (1 - BETA_2) * gradient ** 2
    alpha = learning_rate * np.sqrt(1 - BETA_2) / (1 - BETA_1)
    return alpha * m / (np.sqrt(v) + EPSILON)


def test_adamw_decays_the_kernel_in_the_step_not_through_the_loss(tiny_nets):
    params = step_params(optimizer="adamw", weight_decay=0.5)
    model = keras_model(params)
    kernel, bias = model.network.trainable_variables
    rng = np.random.default_rng(0)
    kernel0, bias0 = rng.normal(0, 1, kernel.shape), rng.normal(0, 1, bias.shape)
    kernel.assign(kernel0), bias.assign(bias0)
    g_kernel, g_bias = rng.normal(0, 0.1, kernel.shape), rng.normal(0, 0.1, bias.shape)
    model.apply_step([tf.constant(g_kernel, tf.float32), tf.constant(g_bias, tf.float32)])
    adamw = kernel0 - 0.1 * 0.5 * kernel0 - first_adam_delta(g_kernel, 0.1)
    adam_with_l2 = kernel0 - first_adam_delta(g_kernel + 0.5 * kernel0, 0.1)  # d(wd * l2_loss) = wd * w
    np.testing.assert_allclose(kernel.numpy(), adamw, rtol=1e-5, atol=1e-6)
    assert np.abs(kernel.numpy() - adam_with_l2).max() > 0.05
    np.testing.assert_allclose(bias.numpy(), bias0 - first_adam_delta(g_bias, 0.1), rtol=1e-5, atol=1e-6)
    # ... and the loss has no L2 term with adamw, where adam keeps the reference ResNet's.
    labels, logits, weights = tf.constant([0, 1]), tf.constant([[1., 0., 0.], [0., 2., 0.]]), tf.ones([2])
    total, data = loss_lib.compute_loss(labels, logits, weights, model.network, params)
    assert float(total) == float(data)
    total, data = loss_lib.compute_loss(labels, logits, weights, model.network, dict(params, optimizer="adam"))
    assert float(total - data) == pytest.approx(0.5 * 0.5 * np.sum(kernel.numpy() ** 2), rel=1e-5)


@pytest.mark.parametrize("clip_norm, scale", [(0.0, 1.0), (100.0, 1.0), (0.5, None)])
def test_gradients_are_clipped_by_their_global_norm(tiny_nets, clip_norm, scale):
    """Plain SGD (momentum 0): the step is learning_rate x the clipped gradient."""
    model = keras_model(step_params(optimizer="momentum", momentum=0.0, gradient_clip_norm=clip_norm))
    variables = model.network.trainable_variables
    before = [v.numpy() for v in variables]
    gradients = [np.full(v.shape, 0.3, np.float32) for v in variables]
    norm = np.sqrt(sum(np.sum(g ** 2) for g in gradients))
    assert norm > 0.5  # the 0.5 clip acts
    model.apply_step([tf.constant(g) for g in gradients])
    scale = scale or clip_norm / norm
    for variable, start, gradient in zip(variables, before, gradients):
        np.testing.assert_allclose(start - variable.numpy(), 0.1 * scale * gradient, rtol=1e-5)


def random_weights(variables, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, v.shape).astype(np.float32) for v in variables]


def keras_steps(params, weights, gradient_steps):
    model = keras_model(params)
    for variable, value in zip(model.network.variables, weights):
        variable.assign(value)
    for gradients in gradient_steps:
        model.apply_step([tf.constant(g) for g in gradients])
    return [v.numpy() for v in model.network.variables]


def estimator_steps(params, weights, gradient_steps):
    """model_fn's minimize in a graph, on a loss whose gradients are the given ones (linear)."""
    from trainer.estimator import model as estimator_model
    from trainer.objective import schedule
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        network = nets.build_from_params(params)
        variables = network.trainable_variables
        fed = [tf.compat.v1.placeholder(tf.float32, v.shape) for v in variables]
        loss = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(fed, variables)])
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = estimator_model.minimize(
            loss, network, schedule.learning_rate_schedule(global_step, params), global_step, params)
        session.run(tf.compat.v1.global_variables_initializer())
        for variable, value in zip(network.variables, weights):
            variable.load(value, session)
        for gradients in gradient_steps:
            session.run(train_op, dict(zip(fed, gradients)))
        return session.run(network.variables)


@pytest.mark.parametrize("overrides", [
    {"optimizer": "adamw", "weight_decay": 0.3, "gradient_clip_norm": 1.0, "lr_schedule": "cosine",
     "train_steps": 4, "backbone_learning_rate_multiplier": 0.5},
    {"optimizer": "adam", "gradient_clip_norm": 0.2, "backbone_learning_rate_multiplier": 0.1},
    {"optimizer": "momentum", "weight_decay": 0.3, "gradient_clip_norm": 1.0},  # decay: in the loss only
], ids=["adamw_clipped_cosine_backbone", "adam_clipped_backbone", "momentum_constant_rate"])
@needs_estimator
def test_both_engines_take_the_same_steps(tiny_nets, overrides):
    """Two steps (the cosine rate changes between them) from the same weights and gradients;
    momentum at a constant rate (docs/migration.md: the engines' momentum differs while it changes)."""
    params = step_params(model="tiny_backbone_net", **overrides)
    tf.keras.backend.clear_session()
    shapes = nets.build_from_params(params)
    weights = random_weights(shapes.variables, seed=1)
    weights = [np.abs(w) + 0.5 if "moving_variance" in v.name else w for v, w in zip(shapes.variables, weights)]
    gradient_steps = [random_weights(shapes.trainable_variables, seed) for seed in (2, 3)]
    by_keras = keras_steps(params, weights, gradient_steps)
    by_estimator = estimator_steps(params, weights, gradient_steps)
    moved = max(np.abs(k - w).max() for k, w in zip(by_keras, weights))
    assert moved > 0.01
    for variable, keras_value, estimator_value in zip(shapes.variables, by_keras, by_estimator):
        np.testing.assert_allclose(keras_value, estimator_value, rtol=1e-5, atol=1e-6, err_msg=variable.name)


def test_a_new_backbone_trains_at_its_learning_rate_multiplier():
    """convnext_tiny (layer norm, layer scales): Adam's first step moves each weight by about the
    rate, 0.1 in the head and 0.1 x 0.1 in the backbone, which has its own optimizer."""
    params = step_params(model="convnext_tiny", image_size=32, optimizer="adam", freeze_backbone=False,
                         dropout_rate=0.0, backbone_learning_rate_multiplier=0.1)
    model = keras_model(params)
    head, backbone = [v for v in model.network.trainable_variables if v.name.startswith("logits")], \
        nets.backbone_of(model.network).trainable_variables
    assert model.backbone_optimizer is not None and len(backbone) == 180 and len(head) == 2
    before = {v.ref(): v.numpy() for v in model.network.trainable_variables}
    model.apply_step([tf.ones_like(v) for v in model.network.trainable_variables])
    moved = {v.ref(): float(np.abs(v.numpy() - before[v.ref()]).max()) for v in model.network.trainable_variables}
    assert {round(moved[v.ref()], 4) for v in head} == {0.1}
    assert {round(moved[v.ref()], 4) for v in backbone} == {0.01}
