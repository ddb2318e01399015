"""Which versions of a model the stand-in serves, and when a failed one is tried again.

select_versions is TF Serving's model_version_policy (`latest` N, default 1; `all`;
`specific`) over the complete versions present (common/export_versions.py). A version
that failed to load is retried only when its files change (fingerprint_version).
check_model_base says at once that a base path is a level off, where TF Serving waits
(a deliberate difference, docs/serving.md).

    .venv/bin/python -c "from serving.standin import version_policy as v; print(v.select_versions(None, [1, 3, 2]))"
"""
import os

from common import export_versions
from common.user_errors import UserError


class ModelBaseAboveModel(UserError):
    """--model_base_path names the folder above a model's base, or one version inside it."""


def select_versions(policy, present):
    """The versions a ModelVersionPolicy serves out of the loadable ones present."""
    choice = policy.WhichOneof("policy_choice") if policy is not None else None
    if choice == "all":
        return set(present)
    if choice == "specific":
        return set(present) & set(policy.specific.versions)
    count = max(policy.latest.num_versions, 1) if choice == "latest" else 1  # TF's default: 1
    return set(sorted(present)[-count:])


def fingerprint_version(export_dir):
    """(path, size, mtime) of every file under a version directory, sorted: a failed version
    is retried when it changes, so a copy in progress fails once per change, not per poll."""
    import tensorflow as tf  # here: the server's check_model_base answers before TensorFlow loads
    entries = []
    for root, _, names in tf.io.gfile.walk(export_dir):
        for name in names:
            path = os.path.join(root, name)
            try:
                stat = tf.io.gfile.stat(path)
            except tf.errors.NotFoundError:  # deleted between the listing and the stat
                continue
            entries.append((path, stat.length, stat.mtime_nsec))
    return tuple(sorted(entries))


def model_bases_below(base):
    """The sub-folders of a local base that hold complete numbered versions, sorted."""
    try:
        names = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(base, name) for name in names
            if os.path.isdir(os.path.join(base, name))
            and export_versions.list_versions(os.path.join(base, name))]


def check_model_base(base, flag="--model_base_path"):
    """ModelBaseAboveModel naming the base meant, for a local base that is one version or holds
    none while a sub-folder does; versions, a missing base and gs:// pass."""
    if export_versions.is_url(base) or export_versions.list_versions(base):
        return
    if os.path.isfile(os.path.join(base, export_versions.SAVED_MODEL_FILE)):
        parent = os.path.dirname(os.path.abspath(base.rstrip("/")))
        raise ModelBaseAboveModel(
            f"{flag}={base} is one version of a model (it holds saved_model.pb), not the "
            f"model's base of numbered versions: did you mean {flag}={parent}?")
    below = model_bases_below(base.rstrip("/"))
    if below:
        also = f" (also: {', '.join(below[1:])})" if len(below) > 1 else ""
        raise ModelBaseAboveModel(
            f"{flag}={base} holds no numbered version directory, but {below[0]} does: did you "
            f"mean {flag}={below[0]}?{also}")
