"""The Keras engine (--engine keras): tf.distribute.TPUStrategy + a Keras model on the same data, settings and serving contract.

strategy.py builds TPUStrategy from the TPU settings; model.py wraps a trainer/nets
network in a keras.Model whose train_step is the Estimator engine's step (the shared
loss, learning rate and moving averages of trainer/objective/); checkpoint.py keeps
OUT/model.ckpt-<step> with a tf.train.CheckpointManager; train.py runs train_step
steps_per_execution (= iterations_per_loop) steps per call between checkpoints;
evaluate.py counts every eval image once; export.py writes the contract's SavedModel;
predict.py classifies for --mode predict; engine.py answers trainer/run/driver.py. Nothing here imports
tensorflow_estimator or trainer/estimator/ (tests/trainer/test_keras_imports.py).

    .venv/bin/python -m trainer.task --engine keras --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
