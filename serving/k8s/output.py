"""The objects written as YAML files into --output_dir, which appears whole or not at all.

One file per object, numbered in the order kubectl should create them (`kubectl apply -f
DIR` takes a folder's files by name): N-<kind>.yaml. The files are written into a folder
beside --output_dir, then that folder is renamed into place (common/publish.py); an earlier
output of this command there is replaced whole (serving/k8s/checks.py refuses a folder with
other files).

    .venv/bin/python -m serving.k8s --model_base_path gs://B/run/export/image_classifier --output_dir k8s/
"""
import glob
import os
import shlex
import shutil

import yaml

from common import publish as publish_folder


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


class LocalFiles:
    """common/publish.py's file operations on this machine's disk, without TensorFlow (whose
    import would take the command from under a second to several)."""

    @staticmethod
    def exists(path):
        return os.path.exists(path)

    @staticmethod
    def makedirs(path):
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def rename(source, destination):
        os.rename(source, destination)

    @staticmethod
    def remove_tree(path):
        shutil.rmtree(path)

    @staticmethod
    def glob(pattern):
        return glob.glob(pattern)


def publish(texts, output_dir):
    """Writes texts ({file name: text}) into a folder beside output_dir, then renames it into
    place (common/publish.py); an earlier output_dir is set aside first and deleted after, and
    what a killed run left beside it is cleared first (its earlier output put back)."""
    with publish_folder.folder(os.path.abspath(output_dir), replace=True, files=LocalFiles,
                               clear_leftovers=True) as stage:
        for name, text in texts.items():
            with open(os.path.join(stage.path, name), "w", encoding="utf-8") as f:
                f.write(text)
