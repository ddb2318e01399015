"""A `tensorflow` that cannot be imported (tests/user_commands.py, without_tensorflow=True): a command
that answers with it on its path answered before TensorFlow loads."""
raise ImportError("TensorFlow was imported: this answer was meant to come before TensorFlow loads")
