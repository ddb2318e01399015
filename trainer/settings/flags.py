"""The trainer's flags and --help, made from the table (trainer/settings/table.py).

One flag per setting, with the setting's name (plus its aliases), grouped as the table
is, each help line showing the default, the allowed values and the reason. Every flag
defaults to "unset", so a flag overrides only what the user typed (tensorflow/tpu
style). Parsing imports no TensorFlow: `--help` and a typo'd flag answer at once.

    .venv/bin/python -m trainer.task --help
"""
import argparse

from common import console
from trainer.settings import table

DESCRIPTION = "Train, evaluate and export an image classifier with TPUEstimator."
PROG = "python -m trainer.task"


def make_parser(description=DESCRIPTION, prog=PROG):
    """The parser: --config, -v and one flag per setting of the table."""
    parser = console.ArgumentParser(
        prog=prog, description=description,
        usage=f"{prog} [--config FILE.yaml] [-v] [--SETTING VALUE ...]  (every setting below)",
        argument_default=argparse.SUPPRESS)  # untyped flags stay out of the namespace
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML mapping of settings, applied after an earlier run's params.json "
                             "and before the flags")
    parser.add_argument("-v", "--verbose", action="count", dest="verbosity",
                        help="also show TensorFlow's INFO lines (-vv: and its debug lines)")
    for title, settings in table.GROUPS:
        group = parser.add_argument_group(title)
        for setting in settings:
            add_flag(group, table.SETTINGS[setting.name])
    return parser


def add_flag(group, setting):
    names = [f"--{setting.name}", *setting.aliases]
    if setting.kind is bool:
        group.add_argument(*names, dest=setting.name, action=argparse.BooleanOptionalAction,
                           help=help_text(setting))
        return
    # Typed by checks.coerce, so that a bad value is named with its source like a file's.
    group.add_argument(*names, dest=setting.name, metavar=metavar(setting), help=help_text(setting))


def metavar(setting):
    if isinstance(setting.allowed, table.OneOf):
        return "{" + ",".join(setting.allowed.choices) + "}"
    if setting.kind is list:
        return "N,N,..."
    return {int: "N", float: "X"}.get(setting.kind, "TEXT")


def help_text(setting):
    """'what it is (default: 64; must be >= 1). Why: reason' ('%' escaped for argparse)."""
    default = "unset" if setting.default is None else repr(setting.default)
    rule = setting.describe_allowed()
    text = f"{setting.help} (default: {default}{'; ' + rule if rule else ''})"
    if setting.reason:
        text += f". Why: {setting.reason}"
    return text.replace("%", "%%")


def parse_flags(argv):
    """(the settings the user typed as {name: text}, the --config file or None).

    --help and flag mistakes exit here (code 0 and 2), before anything heavy is imported.
    """
    flag_values = vars(make_parser().parse_args(argv))
    flag_values.pop("verbosity", None)
    return flag_values, flag_values.pop("config", None)
