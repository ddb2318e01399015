"""The numbered versions an export directory holds, and which one is served: the one rule.

An export base (OUT/export/<model_name>, OUT/best_export/<model_name>) holds version
directories named by a whole number; a version is complete when its saved_model.pb is
there, and TF Serving serves the highest complete one. The trainer's export pruning and
report, serving/launch.py, batch prediction and the stand-in's model store all ask here.

Local paths are read with os (no TensorFlow or Beam import: the launcher's start stays
quick); URLs (gs://, or any scheme Beam knows) with Beam's FileSystems, one listing per
call, which reads the GCS emulator too (STORAGE_EMULATOR_HOST; tf.io.gfile cannot).

    .venv/bin/python -c "from common import export_versions as e; print(e.list_versions('OUT/export/image_classifier'))"
"""
import os

from common.user_errors import UserError

SAVED_MODEL_FILE = "saved_model.pb"


class ExportNotFound(UserError):
    """A model path that is neither an export version directory nor an export base."""


def is_url(path):
    return "://" in path


def is_version_name(name):
    """A version directory's name: a whole number as str(int) writes it, so that
    version_dir(base, int(name)) is that directory ("-1", "1.5", "v1" and "0012" are not)."""
    return name.isascii() and name.isdigit() and str(int(name)) == name


def list_versions(base, complete=True):
    """The version numbers under base, ascending; [] when base is absent or holds none.

    complete=False also lists numbered directories without a saved_model.pb (a copy in
    progress, a damaged one): what pruning must delete, though nothing serves it.
    """
    base = base.rstrip("/")
    found = remote_versions(base) if is_url(base) else local_versions(base)
    return sorted(int(name) for name, has_model in found.items() if has_model or not complete)


def latest_version(base):
    """The highest complete version under base (the one TF Serving serves), or None."""
    return max(list_versions(base), default=None)


def require_latest_version(base, flag="--model_base_path"):
    """latest_version(base); ExportNotFound naming flag when base holds no complete version."""
    version = latest_version(base)
    if version is None:
        raise ExportNotFound(f"{flag}={base} holds no <version>/saved_model.pb; "
                             "pass OUT/export/<model_name> of a trainer run")
    return version


def version_dir(base, version):
    return f"{base.rstrip('/')}/{version}"


def local_versions(base):
    """{numbered directory name: holds saved_model.pb} under a local base."""
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {name: os.path.isfile(os.path.join(base, name, SAVED_MODEL_FILE))
            for name in names
            if is_version_name(name) and os.path.isdir(os.path.join(base, name))}


def remote_versions(base):
    """{numbered directory name: holds saved_model.pb} under a URL, from one listing."""
    from apache_beam.io.filesystems import FileSystems
    found = {}
    for metadata in FileSystems.match([f"{base}/**"])[0].metadata_list:
        relative = metadata.path[len(base) + 1:].split("/")
        if len(relative) > 1 and is_version_name(relative[0]):
            found[relative[0]] = found.get(relative[0], False) or relative[1:] == [SAVED_MODEL_FILE]
    return found


def has_saved_model(path):
    model_file = f"{path.rstrip('/')}/{SAVED_MODEL_FILE}"
    if not is_url(model_file):
        return os.path.isfile(model_file)
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.exists(model_file)


def resolve_export_dir(path):
    """(version directory, version) for an export base (its highest version, as TF Serving
    serves) or a version directory itself (version None when its name is not a number):
    every command takes either, and says which. ExportNotFound otherwise."""
    path = path.rstrip("/")
    if has_saved_model(path):
        name = path.rsplit("/", 1)[-1]
        return path, int(name) if is_version_name(name) else None
    version = latest_version(path)
    if version is not None:
        return version_dir(path, version), version
    raise ExportNotFound(
        f"{path} is not an export: no saved_model.pb in it or in a numbered version directory "
        f"below it; pass OUT/export/<model_name> or one of its version directories")

