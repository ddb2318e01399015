"""The JAX engine: Keras 3 on JAX, for the TPUs TensorFlow no longer trains on (v6e, TPU7x) and v5e/v5p.

The same records, settings, run directory and export as the other engines; made by
trainer/task.py for --engine jax, in .venv-jax (make venv-jax).

    .venv-jax/bin/python -m trainer.task --engine jax --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
