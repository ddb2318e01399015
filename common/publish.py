"""THE way a folder is published whole: written in a staging folder beside its place, then renamed in.

A reader (TF Serving polling an export base, `kubectl apply -f DIR`, a person) finds no folder
or a whole one, never a half-written one, whatever step a publish is stopped or killed at. Every
folder the stages publish goes through folder(): an export version and its copy
(trainer/export/staging.py), the TFLite directory (trainer/export/tflite_files.py) and the
Kubernetes manifests (serving/k8s/output.py). A file is common/atomic_write.py's; a dataset
(preprocess/output_dir.py) and batch predictions (common/prediction_records.py) are sets of
files moved into a folder that holds other files too, through Beam's FileSystems.

The staging folder is PARENT/.NAME.staging-<random>: beside its place, so the rename stays on
one file system; a dot and no number, so readers' globs and TF Serving's scan for numbered
versions pass it by; random, so two publishers never write into each other's. Through
tf.io.gfile (local, gs://, any scheme TF knows), imported on first use; a caller that must not
load TensorFlow passes its own file operations (serving/k8s/output.py). Locally the rename is
rename(2), atomic; on gs:// TF copies each object and deletes the staged one.

    .venv/bin/python -c "from common import publish; print(publish.leftovers('OUT/export/image_classifier/5'))"
"""
import contextlib
import dataclasses
import posixpath
import uuid

STAGING = "staging"  # PARENT/.NAME.staging-<random>: the folder being written
OLD = "old"  # PARENT/.NAME.old-<random>: the replaced folder, until the new one is in place


class GFiles:
    """folder()'s file operations through tf.io.gfile. Another set (serving/k8s/output.py's,
    local, without TensorFlow) has the same five."""

    @staticmethod
    def gfile():
        import tensorflow as tf  # on first use: importing this module loads no TensorFlow
        return tf.io.gfile

    @staticmethod
    def exists(path):
        return GFiles.gfile().exists(path)

    @staticmethod
    def makedirs(path):
        GFiles.gfile().makedirs(path)

    @staticmethod
    def rename(source, destination):
        GFiles.gfile().rename(source, destination)

    @staticmethod
    def remove_tree(path):
        GFiles.gfile().rmtree(path)

    @staticmethod
    def glob(pattern):
        return GFiles.gfile().glob(pattern)


@dataclasses.dataclass
class Stage:
    path: str  # the staging folder, made empty
    content: str = None  # what is moved into place: path itself, or a folder a writer made below it


def aside(destination, what):
    """PARENT/.NAME.<what>-<random>, beside destination."""
    parent, name = posixpath.split(destination.rstrip("/"))
    return posixpath.join(parent, f".{name}.{what}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def folder(destination, replace=False, files=GFiles, clear_leftovers=False):
    """Yields a Stage whose empty folder the with-block fills; when the block ends normally, that
    folder (or stage.content) is renamed to destination. On any exception, Ctrl-C and SystemExit
    included, it is deleted and destination stays as it was; a kill leaves it beside destination.

    An existing destination: FileExistsError, or with replace the old folder is set aside, put
    back if the new one's rename fails, and deleted after. clear_leftovers (only for a caller that
    is destination's only publisher now): first clear what killed publishes of destination left,
    their staging folders deleted and a folder set aside by a replace put back or deleted
    (remove_leftovers).
    """
    destination = destination.rstrip("/")
    if clear_leftovers:
        remove_leftovers(destination, files)
    stage = Stage(aside(destination, STAGING))
    files.makedirs(stage.path)
    try:
        yield stage
        move_into_place(stage.content or stage.path, destination, replace, files)
    finally:
        with contextlib.suppress(Exception):  # renamed away already, or the disk itself failed
            if files.exists(stage.path):
                files.remove_tree(stage.path)


def move_into_place(staged, destination, replace, files):
    """staged renamed to destination, the old destination set aside first (see folder)."""
    if not files.exists(destination):
        files.rename(staged, destination)
        return
    if not replace:
        raise FileExistsError(f"{destination} exists; it is not replaced")
    old = aside(destination, OLD)
    files.rename(destination, old)
    try:
        files.rename(staged, destination)
    except BaseException:
        files.rename(old, destination)  # the earlier folder stays as it was
        raise
    files.remove_tree(old)


def leftovers(destination, files=GFiles, what=STAGING):
    """The folders killed publishes of destination left beside it: their staging folders, or
    (what=OLD) the folders a replace set aside."""
    parent, name = posixpath.split(destination.rstrip("/"))
    return sorted(files.glob(posixpath.join(parent, f".{name}.{what}-*")))


def remove_leftovers(destination, files=GFiles):
    """Deletes the staging folders killed publishes of destination left. A replace killed between
    its two renames left destination absent and the old folder aside: it is put back, so the
    folder a reader had is there again; one killed after both left the old one: deleted."""
    for path in leftovers(destination, files):
        files.remove_tree(path)
    set_aside = leftovers(destination, files, OLD)
    if not files.exists(destination):
        if len(set_aside) == 1:
            files.rename(set_aside[0], destination)
        return  # several: which one was newest is not known; they are left for a person
    for path in set_aside:  # the new folder is in place
        files.remove_tree(path)


def remove_leftovers_in(parent, files=GFiles):
    """remove_leftovers for every folder published into parent, for a caller that is parent's
    only publisher now (the trainer, holding OUT's lock, of its export versions): a killed
    export of another step is cleared too, not only when that step is exported again."""
    names = {posixpath.basename(path).rsplit(".", 1)[0][1:]
             for what in (STAGING, OLD) for path in files.glob(posixpath.join(parent, f".*.{what}-*"))}
    for name in sorted(names):
        remove_leftovers(posixpath.join(parent, name), files)
