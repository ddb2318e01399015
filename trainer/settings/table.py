"""THE table of the trainer's settings: each declared once, with everything derived from it.

A setting's name, type (from its default), default, allowed values, one-line help and
reason live in one `Setting(...)` below. The flags and `--help` (trainer/settings/flags.py),
the `--config` file keys and the saved `OUT/params.json` (trainer/chain.py) and
the check of every value (trainer/settings/checks.py) are all made from it; no other
module restates a default or a range.

Why a table of frozen dataclasses and not absl flags or ml_collections: the same
declaration must serve argparse (the one parser style of every entry point here,
which Beam's option parsing also needs), a YAML file and a saved JSON file, and
`--help` must not import TensorFlow (absl's flags come with it in this stack). A
plain table reads top to bottom like nanoGPT's defaults, carries tensorflow/models'
`restrictions` as `allowed`, and imports nothing heavier than `re`.

    .venv/bin/python -m trainer.settings.table          # the table as text: group, name, default, allowed, on_resume
"""
import dataclasses
import math
import posixpath
import re

from common import signature


@dataclasses.dataclass(frozen=True)
class Interval:
    """Numbers in an interval, written as a reader writes it: "(0, 1]", ">= 1", "> 0"."""
    text: str

    def bounds(self):
        """(low, low_closed, high, high_closed) of the text."""
        match = re.fullmatch(r"([>]=?) *(\S+)", self.text)
        if match:
            return float(match[2]), match[1] == ">=", math.inf, False
        match = re.fullmatch(r"([\[(]) *(\S+) *, *(\S+) *([\])])", self.text)
        if not match:
            raise ValueError(f"not an interval: {self.text!r}")
        return float(match[2]), match[1] == "[", float(match[3]), match[4] == "]"

    def allows(self, value):
        low, low_closed, high, high_closed = self.bounds()
        above = value >= low if low_closed else value > low
        below = value <= high if high_closed else value < high
        return above and below

    def describe(self):
        return f"must be {self.text}" if self.text[0] in "<>" else f"must be in {self.text}"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of a few names."""
    choices: tuple

    def allows(self, value):
        return value in self.choices

    def describe(self):
        return f"must be one of {list(self.choices)}"


@dataclasses.dataclass(frozen=True)
class Matches:
    """A name of a family (e.g. top_<k>_accuracy): a full match of pattern."""
    pattern: str
    text: str

    def allows(self, value):
        return re.fullmatch(self.pattern, value) is not None

    def describe(self):
        return f"must be {self.text}"


@dataclasses.dataclass(frozen=True)
class Predicate:
    """A rule no interval says, e.g. ResNet's 6n+2 depths."""
    test: object  # value -> bool
    text: str

    def allows(self, value):
        return self.test(value)

    def describe(self):
        return f"must be {self.text}"


def is_regex(text):
    try:
        re.compile(text)
    except re.error:
        return False
    return True


# What a setting's new value does when OUT holds checkpoints of a run made with another
# (docs/training.md#resuming-with-other-settings). A network's options (NETWORKS) are
# refused for the network that reads them, whatever their column says.
ON_RESUME = {
    "refuse": "what the checkpoints were built for: refused in one line, nothing written",
    "record": "how the run learns: taken, named (from -> to) in one line and appended to "
              "params.json's recipe_changes with the step it applies from",
    "allow": "how the run is operated (paths, TPU, intervals, evaluation, logging): taken",
}


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting. Its type is its default's (a None default: a string, unset unless given).

    allowed: a rule (Interval, OneOf, Matches, Predicate), checked on every value, from
    any source; a list setting's rule applies to each item. Every float is also refused
    when NaN or infinite. per_command: what one command does (never carried over from
    an earlier run's params.json). on_resume: what another value does to a run whose
    checkpoints OUT holds (ON_RESUME; trainer/run/params_file.py). aliases: other flag names.
    """
    name: str
    default: object
    help: str
    allowed: object = None
    reason: str = ""
    per_command: bool = False
    on_resume: str = "allow"
    required: bool = False
    aliases: tuple = ()
    group: str = ""

    def __post_init__(self):
        if self.on_resume not in ON_RESUME:
            raise ValueError(f"{self.name}: on_resume={self.on_resume!r} is not one of {list(ON_RESUME)}")

    @property
    def kind(self):
        if self.default is None:
            return str
        return list if isinstance(self.default, list) else type(self.default)

    @property
    def item_kind(self):
        """The type of a list setting's items."""
        return type(self.default[0]) if self.kind is list else None

    def describe_allowed(self):
        if self.allowed:
            return self.allowed.describe()
        return "must be a finite number" if self.kind is float else ""


@dataclasses.dataclass(frozen=True)
class Network:
    """What a network reads of the settings (trainer/nets builds it from exactly these)."""
    options: tuple
    has_backbone: bool = False
    min_image_size: int = 8
    keras3: bool = False  # built for Keras 3 too: the JAX engine trains it (trainer/nets/)


BACKBONE_OPTIONS = ("freeze_backbone", "dropout_rate")
# Every network trainer/nets can build, and the settings each reads.
NETWORKS = {
    "small_cnn": Network(("cnn_filters", "dense_units", "dropout_rate"), keras3=True),
    "resnet": Network(("resnet_depth", "resnet_width"), keras3=True),
    # keras.applications backbones (trainer/nets/applications.py): Keras needs 32 px at least.
    **{name: Network(BACKBONE_OPTIONS + ("batch_norm_momentum",), has_backbone=True, min_image_size=32,
                     keras3=True)
       for name in ("resnet50", "efficientnet_b0", "mobilenet_v2", "efficientnetv2_b0", "efficientnetv2_s")},
    # Layer norm, no batch norm: it reads no batch_norm_momentum.
    "convnext_tiny": Network(BACKBONE_OPTIONS, has_backbone=True, min_image_size=32, keras3=True),
    # A TF Hub module takes the momentum as an argument when its __call__ has one (hub_backbone.py).
    "hub": Network(("hub_module",) + BACKBONE_OPTIONS + ("batch_norm_momentum",), has_backbone=True),
}
AUGMENT_POLICIES = ("none", "randaugment", "autoaugment")  # trainer/data/augment.py
# trainer/estimator/optimizers.py and trainer/keras/model.py; adamw's decay is decoupled.
OPTIMIZERS = ("momentum", "adam", "adamw")
ADAMW_MAX_WEIGHT_DECAY = 1.0  # adamw: each step keeps (1 - learning_rate x weight_decay) of a kernel
ENGINES = ("estimator", "keras", "jax")  # trainer/estimator/, trainer/keras/, trainer/jax/ (docs/migration.md)


@dataclasses.dataclass(frozen=True)
class ModeReads:
    """What a --mode reads, the one place its name and this are kept (trainer/run/modes.py adds
    what the driver does around it)."""
    trains: bool = False     # reads the train split; writes checkpoints
    evaluates: bool = False  # reads the eval split
    predicts: bool = False   # reads --predict_input


MODE_TABLE = {
    "train_and_eval": ModeReads(trains=True, evaluates=True),
    "evaluate": ModeReads(evaluates=True),
    "export": ModeReads(),
    "predict": ModeReads(predicts=True),
    "train": ModeReads(trains=True),
    "continuous_eval": ModeReads(evaluates=True),
}
MODES = tuple(MODE_TABLE)


def mode_reads(params):
    """The ModeReads of params["mode"]."""
    return MODE_TABLE.get(params["mode"], ModeReads())  # an unknown one: refused by its OneOf


PREDICTIONS_SUBDIR = "predictions"  # predict_output_dir unset: OUT/predictions


def predict_output_dir(params):
    """Where --mode predict writes: predict_output_dir, or OUT/predictions when unset."""
    return params["predict_output_dir"] or posixpath.join(params["output_dir"], PREDICTIONS_SUBDIR)


POSITIVE = Interval(">= 1")
NON_NEGATIVE = Interval(">= 0")
FRACTION = Interval("[0, 1)")
# Eval metrics trainer/estimator/model.py's metric_fn reports, plus Estimator's own loss.
EVAL_METRIC = Matches(r"accuracy|mean_per_class_accuracy|cross_entropy|loss|top_\d+_accuracy",
                      "an eval metric: accuracy, mean_per_class_accuracy, top_<k>_accuracy, "
                      "cross_entropy or loss")
RESNET_DEPTH = Predicate(lambda depth: depth >= 8 and (depth - 2) % 6 == 0,
                         "6n+2 with n >= 1 (8, 14, 20, 26, ...)")
CLASS_COUNT = Predicate(lambda count: count == 0 or count >= 2,
                        "0 (read from labels.txt) or >= 2 (a classifier needs two classes)")
REGEX = Predicate(is_regex, "a regular expression")

S = Setting
GROUPS = (
    ("Run: where data and outputs live, and what to do", (
        S("train_data_path", None, "glob of training TFRecords, e.g. DIR/train-*"),
        S("eval_data_path", None, "glob of evaluation TFRecords, e.g. DIR/eval-*"),
        S("output_dir", None, "checkpoints, params.json, eval_results.jsonl, exports", required=True,
          aliases=("--job-dir", "--job_dir"), reason="AI Platform passes --job-dir"),
        S("mode", "train_and_eval", "train_and_eval: train with evaluations; train: without (a "
          "continuous_eval job evaluates); continuous_eval: evaluate each new checkpoint of a "
          "trainer's output_dir; evaluate/export/predict act on an existing output_dir",
          OneOf(MODES), per_command=True),
        S("engine", "estimator", "estimator: TPUEstimator (trainer/estimator/); keras: TPUStrategy and "
          "a Keras model (trainer/keras/); jax: Keras 3 on JAX (trainer/jax/, .venv-jax); on the "
          "same data, settings, run directory and exports",
          OneOf(ENGINES), on_resume="refuse",
          reason="TPUEstimator ends with TensorFlow 2.15; a run's checkpoints are its engine's"),
    )),
    ("TPU: off by default, the same engine then runs on CPU/GPU", (
        S("use_tpu", False, "train on a Cloud TPU (TPUEstimator, or TPUStrategy with --engine keras); "
          "off: the same code on CPU/GPU"),
        S("tpu", None, "TPU name or grpc:// address ('local' on a TPU VM); unset = the resolver's default"),
        S("tpu_zone", None, "GCE zone of the TPU; unset = detected on GCE"),
        S("gcp_project", None, "project of the TPU; unset = detected on GCE"),
        S("num_cores", 8, "TPU cores every batch is split across (Estimator engine; the Keras engine "
          "uses the TPU's replica count)", POSITIVE,
          reason="a v2-8/v3-8 has 8 cores"),
        S("iterations_per_loop", 100, "TPU steps per session.run; the Keras engine's steps_per_execution "
          "(on every device)", POSITIVE,
          reason="fewer host round trips"),
        S("use_host_call", True, "TPU summaries go through host_call (Estimator engine)",
          reason="costs an outfeed per step"),
    )),
    ("Model", (
        S("model", "small_cnn", "small_cnn (the flowers sample's), resnet (CIFAR-style); for photos "
          "resnet50, efficientnet_b0, mobilenet_v2, efficientnetv2_b0, efficientnetv2_s, convnext_tiny "
          "(keras.applications) or hub (--hub_module)",
          OneOf(tuple(NETWORKS)), on_resume="refuse"),
        S("cnn_filters", [32, 64], "small_cnn: filters of each conv/pool block", POSITIVE,
          reason="2 blocks fit 32 px digits"),
        S("dense_units", 128, "small_cnn: width of the hidden dense layer", POSITIVE),
        S("dropout_rate", 0.3, "small_cnn and the backbone networks' heads: dropout before the "
          "classifier", FRACTION, reason="1,400 images overfit fast"),
        S("resnet_depth", 20, "resnet: layers (CIFAR ResNet v2); 20 = 3 blocks per stage", RESNET_DEPTH),
        S("resnet_width", 16, "resnet: filters of the first stage (doubled at each later stage)",
          POSITIVE),
        S("use_bfloat16", False, "TPU: bfloat16 activations (mixed precision)", reason="slow on CPU"),
    )),
    ("Fine-tuning (trainer/run/warm_start.py; the backbone networks)", (
        S("warm_start_from", None, "a fresh run starts from this output dir, checkpoint prefix or Keras "
          ".h5/.weights.h5 backbone weights file (e.g. ImageNet weights); unset = from scratch"),
        S("warm_start_exclude", "^logits/", "regex of variables warm start leaves fresh; '' "
          "warm-starts everything", REGEX, reason="the classifier's shape is the class count"),
        S("freeze_backbone", False, "backbone networks: train the head only (phase 1 of a fine-tune)"),
        S("batch_norm_momentum", 0.9, "resnet50/efficientnet_b0/mobilenet_v2/efficientnetv2_b0/"
          "efficientnetv2_s, and hub modules that take it as an argument: batch-norm momentum "
          "(convnext_tiny has layer norm: refused there)",
          FRACTION, reason="the reference ResNet's; Keras' own 0.99 (MobileNetV2 0.999) leaves "
          "eval's statistics near their start for thousands of steps"),
        S("backbone_learning_rate_multiplier", 1.0, "backbone networks: the backbone's learning rate "
          "relative to the head's (e.g. 0.1 to fine-tune gently)", Interval("> 0"),
          reason="--freeze_backbone, not 0, trains the head only", on_resume="record"),
        S("hub_module", None, "model hub: a TF2 SavedModel image feature vector (TF Hub format)"),
    )),
    ("Input (trainer/data/input.py)", (
        S("image_size", 32, "height = width of the network's input, in pixels", Interval(">= 8"),
          on_resume="refuse", reason="the demo digits are 32x32; use 224 for photos"),
        S("transpose_input", False, "TPU: batch-last infeed (Estimator engine)",
          reason="faster on TPU; a needless copy on CPU"),
        S("cache_dataset", True, "keep the records in memory after the first epoch",
          reason="the demo set is a few MB; turn off for data that does not fit RAM"),
        S("random_flip", False, "mirror training images left-right at random",
          reason="off: a mirrored digit is another glyph; on for photos", on_resume="record"),
        S("min_crop_area", 0.85, "smallest fraction of the image a training crop keeps",
          Interval("(0, 1]"), on_resume="record",
          reason="light augmentation; the reference ResNet uses 0.08 for photos"),
        S("shuffle_buffer", 2048, "records in the training shuffle buffer", POSITIVE,
          reason="larger than the demo train split, so it shuffles it fully"),
    )),
    ("Augmentation: training input only, off by default (trainer/data/augment.py, trainer/data/mix.py)", (
        S("augment", "none", "none; randaugment (--randaugment_num_ops random ops of one magnitude per "
          "image); autoaugment (the ImageNet policy, v0 of the AutoAugment paper)",
          OneOf(AUGMENT_POLICIES), on_resume="record",
          reason="off: the demo digits lose their meaning under inversion and solarizing; on for photos"),
        S("randaugment_num_ops", 2, "randaugment: ops applied in turn to each image (N in the paper)",
          Interval("[1, 10]"), reason="Model Garden's and timm's 2", on_resume="record"),
        S("randaugment_magnitude", 9.0, "randaugment: the strength of every op, 0 (none) to 10 (rotate "
          "30 degrees, shear 0.3, translate 45% of the image)", Interval("[0, 10]"),
          on_resume="record", reason="timm's rand-m9 recipes; Model Garden's config uses the maximum, 10"),
        S("random_erasing", 0.0, "chance that a training image gets one random rectangle (2%-33% of "
          "its area) replaced by noise", Interval("[0, 1]"),
          reason="timm's --reprob and Model Garden's; 0.25 in their recipes", on_resume="record"),
        S("mixup_alpha", 0.0, "0 = off; else each training image is blended with another of its batch, "
          "the share lambda ~ Beta(alpha, alpha), and their labels in the same shares",
          NON_NEGATIVE, reason="0.8 in timm's and Model Garden's recipes", on_resume="record"),
        S("cutmix_alpha", 0.0, "0 = off; else a box of another image of the batch is pasted in, "
          "labels shared by area, lambda ~ Beta(alpha, alpha)", NON_NEGATIVE,
          reason="1.0 in timm's and Model Garden's recipes", on_resume="record"),
        S("mixup_switch_prob", 0.5, "with both --mixup_alpha and --cutmix_alpha: the chance a batch "
          "gets CutMix instead of mixup", Interval("[0, 1]"), on_resume="record",
          reason="timm's --mixup-switch-prob"),
    )),
    ("Optimisation", (
        S("train_batch_size", 64, "global training batch", POSITIVE, on_resume="record",
          reason="TPU users raise it (1024 on a v3-8)"),
        S("eval_batch_size", 128, "global eval batch; eval is padded with zero-weight rows", POSITIVE),
        S("predict_batch_size", 8, "global predict batch", POSITIVE, reason="TPUEstimator.predict needs one"),
        S("train_steps", 1500, "global steps to train (the learning-rate schedule's length)", POSITIVE,
          on_resume="record", reason="~70 epochs of the demo split"),
        S("steps_per_eval", 500, "train this many steps between evaluations", POSITIVE),
        S("optimizer", "adam", "momentum (the reference ResNet's), adam, or adamw (Adam with decoupled "
          "weight decay, Loshchilov & Hutter: --weight_decay shrinks the kernels in the step instead "
          "of adding L2 to the loss)", OneOf(OPTIMIZERS),
          on_resume="refuse", reason="its slots are in the checkpoints"),
        S("learning_rate", 0.01, "at learning_rate_batch_size; scaled linearly with the batch",
          Interval("> 0"), on_resume="record"),
        S("learning_rate_batch_size", 256, "the batch learning_rate is given for", POSITIVE,
          reason="Goyal et al.: lr = learning_rate * batch / 256", on_resume="record"),
        S("warmup_steps", 100, "linear learning-rate warm-up steps", NON_NEGATIVE,
          reason="large scaled rates diverge in the first steps", on_resume="record"),
        S("momentum", 0.9, "momentum optimizer only", FRACTION, on_resume="record"),
        S("weight_decay", 1e-4, "momentum and adam: L2 on the kernels, added to the loss; adamw: "
          "each step also takes learning_rate x weight_decay x kernel off every kernel (decoupled, "
          "no L2 term in the loss; must then be < 1, e.g. 0.05). Biases, batch-norm and layer-norm "
          "variables are never decayed", NON_NEGATIVE, on_resume="record",
          reason="the reference ResNet's L2 value; AdamW recipes (timm, Model Garden) use 0.05"),
        S("gradient_clip_norm", 0.0, "clip the gradients to this global norm (all trainable variables "
          "together, after the sum over TPU cores or replicas); 0 = off", NON_NEGATIVE,
          reason="off: the demo trains without; 1.0 is timm's and Model Garden's value for fine-tuning "
          "with AdamW", on_resume="record"),
        S("lr_schedule", "cosine", "after the warm-up: cosine to 0 at train_steps, or step (x0.1 at 30, "
          "60 and 80 of 90 epochs' share of train_steps)", OneOf(("cosine", "step")),
          on_resume="record", reason="cosine is the demo's, tuned with it; step is the reference ResNet's"),
        S("label_smoothing", 0.0, "0 = plain cross entropy", FRACTION,
          reason="the reference ResNet uses 0.1 on ImageNet", on_resume="record"),
        S("moving_average_decay", 0.0, "0 = off; else evaluate and export an exponential moving average "
          "of the weights", FRACTION, on_resume="refuse",
          reason="0.9999 (the reference ResNet's) suits long runs; ~0.99 a few hundred steps"),
        S("top_k", signature.DEFAULT_TOP_K, "eval top-k accuracy, k = min(top_k, num_classes - 1)",
          POSITIVE),
        S("seed", 0, "1 or more: the same run again from the same seed (initial weights, shuffles, "
          "crops, flips, dropout) on the same machine and TensorFlow; 0 = unseeded, every run differs",
          NON_NEGATIVE, on_resume="refuse",
          reason="0 leaves each run (and each tuning trial) a new sample; a seed makes one repeatable, "
          "e.g. to compare the engines"),
    )),
    ("Checkpoints, logging, export", (
        S("save_checkpoints_steps", 250, "steps between checkpoints", POSITIVE,
          reason="a kill loses at most this many steps"),
        S("keep_checkpoint_max", 3, "checkpoints kept; older ones are deleted", POSITIVE),
        S("save_summary_steps", 100, "TensorBoard summary interval (CPU/GPU)", POSITIVE),
        S("log_step_count_steps", 100, "steps/sec and examples/sec are logged this often (-v)", POSITIVE),
        S("progress_seconds", 20, "a progress line (step, loss, examples/s, ETA) this often", POSITIVE),
        S("serving_model_name", signature.DEFAULT_MODEL_NAME, "OUT/export/<serving_model_name>/<version>/",
          Matches(r"[A-Za-z0-9][\w.-]*", "a directory name (letters, digits, _ . -)")),
        S("num_warmup_images", 4, "eval images written as TF Serving warm-up requests", NON_NEGATIVE,
          reason="the first request is not slow; clamped to the eval split's size"),
    )),
    ("Batch prediction (mode predict; trainer/estimator/predict.py)", (
        S("predict_input", None, "CSV of 'uri[,label]' lines (the pipeline's format), a folder or "
          "glob of images (.jpg .jpeg .png .gif .bmp), or a TFRecord glob",
          per_command=True),
        S("predict_format", "jsonl", "jsonl (sharded, for pipelines) or csv (one file, for people)",
          OneOf(signature.PREDICTION_FORMATS), per_command=True, aliases=("--format",),
          reason="--format is serving.batch_predict's name for it"),
        S("predict_output_dir", None, "unset = OUT/predictions, beside the model that made them",
          per_command=True),
        S("predict_export_dir", None, "a SavedModel to predict with; unset = the latest checkpoint",
          per_command=True),
        S("predict_records_per_shard", 10000, "JSON-lines shard size", POSITIVE,
          reason="~2 MB of records, easy to stream"),
        S("predict_chunk_images", 4096,
          "images read and checked at a time (one predict call streams them all)", POSITIVE,
          reason="bounds host RAM however long the input"),
    )),
    ("Evaluation job and early stopping (trainer/run/continuous_eval.py, trainer/run/early_stopping.py)", (
        S("eval_timeout_secs", 3600, "continuous_eval exits after this long without a new checkpoint",
          NON_NEGATIVE),
        S("early_stopping_patience", 0, "stop after this many evaluations without improvement; 0 = never",
          NON_NEGATIVE),
        S("early_stopping_metric", "accuracy", "the eval metric that picks the best export, stops early "
          "and is reported to tuning; loss and cross_entropy count lower as better", EVAL_METRIC),
    )),
    ("Your own TFRecords: no labels.txt / metadata.json beside them (trainer/data/byo_records.py)", (
        S("num_classes", 0, "class count of such records (0 = read from labels.txt)", CLASS_COUNT,
          on_resume="refuse"),
        S("label_offset", 0, "subtracted from image/class/label: 1 for tensorflow/tpu's 1-based records",
          NON_NEGATIVE, on_resume="refuse"),
        S("num_train_examples", 0, "train records there (0 = counted once, cached in "
          "OUT/record_counts.json)", NON_NEGATIVE, per_command=True,
          reason="the split sizes belong to this command's globs"),
        S("num_eval_examples", 0, "eval records there (0 = counted once, cached in "
          "OUT/record_counts.json)", NON_NEGATIVE, per_command=True),
    )),
)
del S

SETTINGS = {setting.name: dataclasses.replace(setting, group=title)
            for title, settings in GROUPS for setting in settings}
DEFAULTS = {name: setting.default for name, setting in SETTINGS.items()}
PARAMS_FILE = "params.json"  # OUT/params.json: the resolved settings, beside the checkpoints
# Read from the dataset's labels.txt (or your own records' class names); never set by the user.
DATASET_KEYS = ("labels",)
PER_COMMAND_KEYS = tuple(name for name, s in SETTINGS.items() if s.per_command)
# What a run was built for, with the chosen network's options (NETWORKS) added.
RUN_IDENTITY_KEYS = DATASET_KEYS + tuple(name for name, s in SETTINGS.items() if s.on_resume == "refuse")
# How the run learns: a resume may change them; each change is said and recorded.
RECIPE_KEYS = tuple(name for name, s in SETTINGS.items() if s.on_resume == "record")
# TPUEstimator puts these in the params it passes on (use_tpu from its own argument):
# never passed to it in params (estimator_params).
TPU_ESTIMATOR_KEYS = ("batch_size", "context", "use_tpu")


def estimator_params(params):
    """params without the keys TPUEstimator sets itself."""
    return {k: v for k, v in params.items() if k not in TPU_ESTIMATOR_KEYS}


def is_decoupled(params):
    """True when the optimizer decays the weights itself (adamw): no L2 term in the loss
    (trainer/objective/loss.py)."""
    return params["optimizer"] == "adamw"


def settings_in_the_loss(params):
    """The settings trainer/objective/loss.py's compute_loss is made with beyond the logits: the
    training loss's, and so the eval metric "loss"'s (the eval metric cross_entropy has neither).
    Another value of one makes losses before and after it measure different things (a resume
    is judged by it before TensorFlow loads, trainer/settings/saved_run.py)."""
    return ("label_smoothing",) if is_decoupled(params) else ("label_smoothing", "weight_decay")


def main():
    for title, settings in GROUPS:
        print(title)
        for setting in settings:
            rule = setting.describe_allowed()
            on_resume = f"  [on a resume: {setting.on_resume}]" if setting.on_resume != "allow" else ""
            print(f"  {setting.name} = {setting.default!r}" + (f"  ({rule})" if rule else "") + on_resume)


if __name__ == "__main__":
    main()
