"""Which versions of a model the stand-in serves, and when a failed one is tried again.

TF Serving's model_version_policy decides which versions are served: `latest`
(the N highest, default 1: TF Serving's default), `all`, or `specific` versions, out
of the complete versions present (common/export_versions.py: the one rule for what a
version is). A version that failed to load is retried only when its files change,
so a copy in progress fails once per change, not once per poll.

    .venv/bin/python -c "from serving.standin import version_policy as v; print(v.select_versions(None, [1, 3, 2]))"
"""
import os

import tensorflow as tf


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
    """(path, size, mtime) of every file under a version directory, sorted.

    A failed version is retried only when this changes, so a copy still in progress is
    retried (and its failure logged) once per change, not once per poll. gfile's mtime
    has one-second resolution; names and sizes carry most changes.
    """
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
