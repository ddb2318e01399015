"""Which TF Serving image the pods run: the one serving.launch would run for the export.

When this machine can read the gs:// base path now (common/gcs_probe.py answers at once),
the export is read: its highest version (common/export_versions.py, the version TF Serving
serves) and the TensorFlow its saved_model.pb records (serving/export_tensorflow.py), and
serving/launch.py's table picks the image built on that TensorFlow or the oldest newer one.
When it cannot, --tf_serving_version X.Y says which TensorFlow wrote the export; without it
that is one line naming the reason and the fix. A base that holds no version, one version
of a model instead of its base, and an export newer than every known image are one line each.

    .venv/bin/python -m serving.k8s --model_base_path gs://B/run/export/image_classifier \\
        --output_dir k8s/ --tf_serving_version 2.15      # without reading the export
"""
import re

from common import export_versions, gcs_probe
from serving import export_tensorflow, launch
from serving.k8s.checks import ManifestError

VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?\Z")
UNREAD_FIX = ("or pass --tf_serving_version X.Y (the TensorFlow that wrote the export) to write "
              "the manifests without reading it")


def choose_image(args):
    """(image, the line saying why) for args.model_base_path; ManifestError or
    launch.LaunchError (one line each) when no image fits or the export cannot be used."""
    if args.tf_serving_version and not VERSION.match(args.tf_serving_version):
        raise ManifestError(f"--tf_serving_version={args.tf_serving_version!r} is not a version; "
                            "pass X.Y or X.Y.Z, e.g. 2.15")
    base = args.model_base_path.rstrip("/")
    written_by, line = read_export(base, is_needed=not (args.tf_serving_version or args.docker_image))
    if args.docker_image:
        return args.docker_image, f"{line}: image {args.docker_image} (--docker_image)"
    if args.tf_serving_version:
        check_not_older(args.tf_serving_version, written_by)
        image, why = launch.choose_docker_image(
            args.tf_serving_version, f"{base} (--tf_serving_version {args.tf_serving_version})")
        return image, f"{line}; --tf_serving_version {args.tf_serving_version}: image {image}{why}"
    version, tensorflow = written_by
    image, why = launch.choose_docker_image(tensorflow, export_versions.version_dir(base, version))
    return image, f"{line}: image {image}{why}"


def read_export(base, is_needed):
    """((highest version, the TensorFlow that wrote it), the line saying so); (None, why not)
    when this machine cannot read base now and is_needed is False. ManifestError when it
    cannot and is_needed, or when base holds no version."""
    try:
        gcs_probe.check_readable(base, "--model_base_path")
    except gcs_probe.GcsUnreachable as err:
        if is_needed:
            raise ManifestError(f"{err}; {UNREAD_FIX}") from None
        return None, f"the export was not read ({err})"
    version = export_versions.latest_version(base)
    if version is None:
        raise ManifestError(describe_no_version(base))
    path = f"{export_versions.version_dir(base, version)}/{export_versions.SAVED_MODEL_FILE}"
    written_by = version, export_tensorflow.parse_tensorflow_version(read_bytes(path), path)
    return written_by, launch.describe_written_by(base, written_by)


def read_bytes(path):
    from apache_beam.io.filesystems import FileSystems  # gs:// (and the tests' emulator)
    with FileSystems.open(path) as f:
        return f.read()


def describe_no_version(base):
    """Why base holds no <version>/saved_model.pb, with the base meant when it can tell."""
    from apache_beam.io.filesystems import FileSystems
    names = [metadata.path[len(base) + 1:].split("/")
             for metadata in FileSystems.match([f"{base}/**"])[0].metadata_list]
    flag = f"--model_base_path={base}"
    if [export_versions.SAVED_MODEL_FILE] in names:
        parent = base.rsplit("/", 1)[0]
        return (f"{flag} is one version of a model (it holds saved_model.pb), not the model's "
                f"base of numbered versions: did you mean --model_base_path={parent}?")
    below = sorted({f"{base}/{parts[0]}" for parts in names if len(parts) == 3
                    and export_versions.is_version_name(parts[1])
                    and parts[2] == export_versions.SAVED_MODEL_FILE})
    if below:
        return (f"{flag} holds no numbered version directory, but {below[0]} does: did you mean "
                f"--model_base_path={below[0]}?")
    return (f"{flag} holds no <version>/saved_model.pb (TF Serving would wait for one); pass "
            "gs://BUCKET/run/export/<model_name> of a trainer run, copied whole")


def check_not_older(tf_serving_version, written_by):
    """ManifestError when the export is readable and was written by a newer TensorFlow than
    --tf_serving_version: an older TF Serving may not load it."""
    if written_by is None:
        return
    version, tensorflow = written_by
    flag, export = launch.tensorflow_minor(tf_serving_version), launch.tensorflow_minor(tensorflow)
    if export and flag < export:
        raise ManifestError(
            f"the export (version {version}) was written by TensorFlow {tensorflow}, newer than "
            f"--tf_serving_version {tf_serving_version}: TF Serving %d.%d may not load it; pass "
            "%d.%d or newer, or leave the flag out" % (flag + export))
