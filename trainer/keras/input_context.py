"""Each input pipeline (one per host) its share: trainer/data/input.py's input_fn under a tf.distribute strategy.

TPUEstimator's PER_HOST_V2 input calls input_fn once per host, with params["batch_size"]
the per-replica batch and params["context"] a TPUContext whose
current_input_fn_deployment() input.py reads (input_shard, batches_per_step) to give
that host its files, or its records, and to pad evaluation to whole steps.
strategy.distribute_datasets_from_function calls a dataset_fn once per input pipeline
(one per TPU host under TPUStrategy, one per worker under MultiWorkerMirroredStrategy)
with a tf.distribute.InputContext; PipelineContext answers the same question from it,
so the Keras engine gives each host the share the Estimator engine gives it, through
the same input_fn. One pipeline of one replica (CPU, one GPU) reads everything in
global batches, as before.

    .venv/bin/python -m pytest tests/trainer/test_keras_pod.py   # two workers, a half each
"""


class PipelineContext:
    """The one TPUContext method input.py calls, answered for one pipeline of a strategy."""

    def __init__(self, input_context):
        self.input_context = input_context  # a tf.distribute.InputContext

    def current_input_fn_deployment(self):
        """(device, invocation index, invocation count, replicas fed per invocation), as
        TPUContext returns it; no device: the strategy places the pipeline itself."""
        pipelines = self.input_context.num_input_pipelines
        replicas = self.input_context.num_replicas_in_sync
        if replicas % pipelines:
            raise ValueError(f"{replicas} replicas do not split evenly across {pipelines} "
                             f"input pipelines (hosts)")
        return None, self.input_context.input_pipeline_id, pipelines, replicas // pipelines


def pipeline_params(params, input_context, global_batch_size):
    """params of one pipeline's input_fn call: the per-replica batch and its PipelineContext."""
    return dict(params, batch_size=input_context.get_per_replica_batch_size(global_batch_size),
                context=PipelineContext(input_context))


def distribute_input_fn(strategy, input_fn, params, global_batch_size):
    """A distributed dataset of global_batch_size examples a step: each input pipeline calls
    input_fn once, with pipeline_params, and feeds its own replicas a batch each."""
    def dataset_fn(input_context):
        return input_fn(pipeline_params(params, input_context, global_batch_size))
    return strategy.distribute_datasets_from_function(dataset_fn)
