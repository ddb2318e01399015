"""Every value checked against its rule in the table, then the rules between settings.

Values arrive as text (flags), YAML or JSON (a --config file, an earlier run's
params.json) and are typed here by the table's declaration (coerce). check_params
then judges the whole set before anything is written, and a problem is one line
naming the setting, its value, what is allowed and where the value came from:

    min_crop_area=0.0 (flag --min_crop_area) must be in (0, 1]

No TensorFlow import: the checks run in a bare Python.

    .venv/bin/python -c "from trainer.settings import checks, table; checks.check_params(dict(table.DEFAULTS, output_dir='/tmp/o'), {})"
"""
import difflib
import math

from common.user_errors import UserError
from trainer.settings import table


class ConfigError(UserError):
    """A setting is unknown, has the wrong type or a value outside what its rule allows."""


def unknown_key_error(key, source):
    """The one line for a key that is not a setting, with the closest setting's name."""
    close = difflib.get_close_matches(key, list(table.SETTINGS), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return ConfigError(f"{source}: {key!r} is not a setting{hint} (python -m trainer.task --help lists them)")


def merge(params, sources, overrides, source, is_saved_run=False):
    """(params, sources) updated with overrides, each value typed by the table; unknown keys
    are refused by name with the closest setting's name. source: where they came from."""
    merged, where = dict(params), dict(sources)
    for key, value in overrides.items():
        if key in table.DATASET_KEYS:
            if not is_saved_run:
                raise ConfigError(f"{source}: {key} is read from the dataset, not set")
            merged[key] = value  # a saved run's dataset values, for export without data
        elif key not in table.SETTINGS:
            raise unknown_key_error(key, source)
        else:
            merged[key] = coerce(key, value, flag_source(key, source))
        where[key] = flag_source(key, source)
    return merged, where


def merge_layers(saved, saved_source, config_values, config_source, flag_values):
    """(params, sources): the table's defaults under an earlier run's params.json (saved), the
    --config file's values and the typed flags, each later layer winning: the chain's order
    (trainer/chain.py), which the early check (early_check.py) follows."""
    params, sources = dict(table.DEFAULTS), {}
    if saved:
        params, sources = merge(params, sources, saved, saved_source, is_saved_run=True)
    params, sources = merge(params, sources, config_values, config_source)
    return merge(params, sources, flag_values, "flags")


def flag_source(key, source):
    return f"flag --{key}" if source == "flags" else source


def coerce(name, value, source):
    """value typed as the table declares name; ConfigError naming the value and its source."""
    setting = table.SETTINGS[name]
    if value is None:
        return None
    try:
        if setting.kind is list:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list) or not items:
                raise TypeError
            return [coerce_scalar(setting.item_kind, item) for item in items]
        return coerce_scalar(setting.kind, value)
    except (TypeError, ValueError):
        wanted = {list: f"a comma-separated list of {getattr(setting.item_kind, '__name__', '')}",
                  bool: "true or false", int: "a whole number", float: "a number",
                  str: "a text"}[setting.kind]
        raise ConfigError(f"{name}={value!r} ({source}) is not {wanted}") from None


def coerce_scalar(kind, value):
    if kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise TypeError
        return value
    if isinstance(value, bool) and kind is not str:
        raise TypeError  # YAML's `true` is not a number
    if kind is int and isinstance(value, float):
        if not value.is_integer():
            raise TypeError
    if kind is int and isinstance(value, str):
        return int(value.strip())
    if kind is str and not isinstance(value, str):
        raise TypeError
    return kind(value)


def value_problem(name, value):
    """Why value breaks name's rule (a phrase such as 'must be in (0, 1]'), or None."""
    setting = table.SETTINGS[name]
    if value is None:
        return "is required" if setting.required else None
    items = value if setting.kind is list else [value]
    for item in items:
        if isinstance(item, float) and not math.isfinite(item):
            return f"is not a finite number: {setting.describe_allowed()}"
        if setting.allowed and not setting.allowed.allows(item):
            return setting.describe_allowed() + closest_choice(setting.allowed, item)
    return None


def closest_choice(rule, value):
    """'; did you mean adamw?' for a name close to one of a OneOf's choices, else ''."""
    if not isinstance(rule, table.OneOf) or not isinstance(value, str):
        return ""
    by_folded = {choice.lower().replace("-", "_"): choice for choice in rule.choices}
    close = difflib.get_close_matches(value.lower().replace("-", "_"), list(by_folded), n=1)
    return f"; did you mean {by_folded[close[0]]}?" if close else ""


def check_params(params, sources):
    """Raises ConfigError for the first bad value (saying how many more there are); else None.

    sources: {name: where its value came from}, e.g. "flag --learning_rate"; "default" if absent.
    """
    problems = [f"{name}={params[name]!r} ({sources.get(name, 'default')}) {problem}"
                for name in table.SETTINGS
                for problem in [value_problem(name, params[name])] if problem]
    problems += relation_problems(params, sources)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)


def relation_problems(params, sources):
    """The rules between settings: what one setting needs of another."""
    def named(name):
        return f"{name}={params[name]!r} ({sources.get(name, 'default')})"
    model, network = params["model"], table.NETWORKS.get(params["model"])
    problems = []
    reads = table.mode_reads(params)
    if reads.predicts and not params["predict_input"]:
        problems.append(f"mode='predict' ({sources.get('mode', 'default')}) needs --predict_input "
                        f"(a CSV of image URIs or a TFRecord glob)")
    typed_early_stopping = [key for key in ("early_stopping_patience", "early_stopping_metric")
                            if sources.get(key, "default").startswith(("flag", "--config"))]
    if reads.trains and not reads.evaluates and typed_early_stopping:
        problems.append(f"{named(typed_early_stopping[0])} needs evaluations, and mode='train' "
                        f"({sources.get('mode', 'default')}) does not evaluate: use --mode "
                        f"train_and_eval (a continuous_eval job beside it does not stop it)")
    if params["engine"] in ("keras", "jax") and params["transpose_input"]:
        problems.append(f"{named('transpose_input')} is TPUEstimator's batch-last infeed; "
                        f"{named('engine')} feeds batch-first (its replicas split batches along "
                        f"their first dimension)")
    if params["engine"] == "jax":
        problems += jax_problems(params, sources, named)
    problems += optimizer_problems(params, named)
    if params["use_tpu"] and params["engine"] == "estimator":
        problems += [f"{named(key)} must be divisible by {named('num_cores')}: each TPU core gets an "
                     f"equal share" for key in ("train_batch_size", "eval_batch_size", "predict_batch_size")
                     if params[key] % params["num_cores"]]
    problems += augmentation_problems(params, named)
    if network is None:
        return problems
    problems += backbone_problems(params, sources, network, named)
    if model == "hub" and not params["hub_module"]:
        problems.append(f"{named('model')} needs --hub_module PATH (a TF2 image feature vector)")
    if model != "hub" and params["hub_module"]:
        problems.append(f"{named('hub_module')} is only read by --model hub, not {model!r}")
    if params["image_size"] < network.min_image_size:
        problems.append(f"{named('image_size')} is too small for model={model!r} "
                        f"(at least {network.min_image_size})")
    return problems


# What the JAX engine finds by itself: JAX sees the TPU chips of the VM (or slice) it runs on.
JAX_UNREAD = ("tpu", "tpu_zone", "gcp_project", "num_cores", "use_host_call")


def jax_problems(params, sources, named):
    """Settings --engine jax cannot honour: a network built with tf.keras only, and the TPU
    settings that name a TPU for TensorFlow to connect to."""
    problems = [f"{named(key)} means nothing to {named('engine')}: JAX trains on the TPU chips "
                f"of the machine it runs on (a TPU VM, each host of a slice); drop it"
                for key in JAX_UNREAD if sources.get(key, "default").startswith(("flag", "--config"))]
    if params["backbone_learning_rate_multiplier"] != table.DEFAULTS["backbone_learning_rate_multiplier"]:
        problems.append(f"{named('backbone_learning_rate_multiplier')}: {named('engine')} trains the "
                        f"whole network with one optimizer so far; drop it or use --engine keras")
    network = table.NETWORKS.get(params["model"])
    if network is not None and not network.keras3:
        keras3 = sorted(name for name, net in table.NETWORKS.items() if net.keras3)
        problems.append(f"{named('model')} is built with tf.keras only; {named('engine')} trains "
                        f"{', '.join(keras3)}: use --engine keras for it")
    return problems


def augmentation_problems(params, named):
    """Augmentation settings that would do nothing: RandAugment's without it, and a switch
    between mixup and CutMix without both. Label smoothing composes with mixup and CutMix at
    every value: it is applied once, in the loss, to the mixed target, which equals timm's
    smoothing of each one-hot before mixing (trainer/objective/loss.py)."""
    problems = [f"{named(key)} is only read by --augment randaugment, not {named('augment')}"
                for key in ("randaugment_num_ops", "randaugment_magnitude")
                if params[key] != table.DEFAULTS[key] and params["augment"] != "randaugment"]
    switch = "mixup_switch_prob"
    if params[switch] != table.DEFAULTS[switch] and not (params["mixup_alpha"] and params["cutmix_alpha"]):
        problems.append(f"{named(switch)} chooses between mixup and CutMix, and needs both "
                        f"--mixup_alpha and --cutmix_alpha above 0 ({named('mixup_alpha')}, "
                        f"{named('cutmix_alpha')})")
    return problems


def backbone_problems(params, sources, network, named):
    """The fine-tuning settings need a backbone; a typed batch_norm_momentum, one with batch norm."""
    problems = [f"{named(key)} needs a network with a backbone, not {named('model')} (one of "
                f"{[n for n, net in table.NETWORKS.items() if net.has_backbone]})"
                for key in ("freeze_backbone", "backbone_learning_rate_multiplier")
                if params[key] != table.DEFAULTS[key] and not network.has_backbone]
    if "batch_norm_momentum" not in network.options and network.has_backbone and \
            sources.get("batch_norm_momentum", "default").startswith(("flag", "--config")):
        problems.append(f"{named('batch_norm_momentum')} is not read by {named('model')}: it has "
                        f"layer norm, not batch norm; drop the setting")
    return problems


def optimizer_problems(params, named):
    """adamw's weight_decay is a per-step fraction of learning_rate: below 1 (the table's rule
    for weight_decay alone, >= 0, is the L2 coefficient's)."""
    if params["optimizer"] == "adamw" and params["weight_decay"] >= table.ADAMW_MAX_WEIGHT_DECAY:
        return [f"{named('weight_decay')} must be in [0, {table.ADAMW_MAX_WEIGHT_DECAY:g}) with "
                f"{named('optimizer')}: each step takes learning_rate x weight_decay of every kernel "
                f"away (decoupled decay; timm and Model Garden use 0.05)"]
    return []
