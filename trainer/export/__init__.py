"""The serving contract's side in the trainer, for both engines: the serving graph's inputs and outputs, staging and checks."""
