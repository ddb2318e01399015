"""The objects written as YAML files into --output_dir, which appears whole or not at all.

One file per object, numbered in the order kubectl should create them (`kubectl apply -f
DIR` takes a folder's files by name): N-<kind>.yaml. The files are written into a folder
beside --output_dir, then that folder is renamed into place; an earlier output of this
command there is replaced whole (serving/k8s/checks.py refuses a folder with other files).

    .venv/bin/python -m serving.k8s --model_base_path gs://B/run/export/image_classifier --output_dir k8s/
"""
import os
import shlex
import shutil
import uuid

import yaml


class Dumper(yaml.SafeDumper):
    """YAML as a person reads it: a text of several lines (a ConfigMap's files) as a block."""


Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def file_name(index, obj):
    return f"{index}-{obj['kind'].lower()}.yaml"


def render(objects, command):
    """{file name: YAML text} of objects, each headed by the command that wrote it."""
    header = (f"# Written by: {command}\n"
              "# Write it again with that command rather than edit it "
              "(docs/serving.md, \"Serving on Kubernetes\").\n")
    return {file_name(index, obj): header + yaml.dump(obj, Dumper=Dumper, sort_keys=False)
            for index, obj in enumerate(objects, 1)}


def command_line(argv):
    return " ".join(shlex.quote(arg) for arg in ["python", "-m", "serving.k8s", *argv])


def publish(texts, output_dir):
    """Writes texts ({file name: text}) into a folder beside output_dir, then renames it into
    place; an earlier output_dir is moved aside first and deleted after."""
    output_dir = os.path.abspath(output_dir)
    os.makedirs(os.path.dirname(output_dir), exist_ok=True)
    staging = aside(output_dir, "staging")
    os.mkdir(staging)
    try:
        for name, text in texts.items():
            with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                f.write(text)
        replace_dir(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when it was renamed


def aside(path, what):
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{what}-{uuid.uuid4().hex[:8]}")


def replace_dir(new, path):
    """new renamed to path; an existing path (this command's earlier output) moved away first."""
    if not os.path.exists(path):
        os.rename(new, path)
        return
    old = aside(path, "old")
    os.rename(path, old)
    try:
        os.rename(new, path)
    except OSError:
        os.rename(old, path)  # the earlier output stays as it was
        raise
    shutil.rmtree(old)
