"""Can this machine read a gs:// path? Asked once per bucket, with a short timeout, before a run uses it.

Without network or credentials, TensorFlow's and Beam's Cloud Storage clients retry for
minutes and then end in a traceback. One listing call through google-cloud-storage,
with a timeout and no retries, tells at once and names the likely cause:

    error: train_data_path='gs://b/data/train-*': no Google Cloud credentials on this machine: ...
    error: train_data_path='gs://b/data/train-*': cannot reach Cloud Storage within 15 s (no network?): ...

It honours STORAGE_EMULATOR_HOST (anonymous access to a local emulator), as the
google-cloud-storage client does. Whether there are credentials at all is asked on its own too
(check_credentials), without a listing, by trainer.task before TensorFlow loads.

    .venv/bin/python -m common.gcs_probe gs://BUCKET/some/prefix      # "ok" or the one line
"""
import os
import sys

from common.user_errors import UserError

TIMEOUT_SECONDS = 15  # per call: connect and read; generous on a slow link, short beside minutes of retries
LOGIN_FIX = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"


class GcsUnreachable(UserError):
    """A gs:// path this machine cannot read now: no credentials, no network, no such bucket."""


def split_gcs_path(path):
    """('bucket', 'prefix before any glob character') of a gs:// path or glob."""
    bucket, _, rest = path[len("gs://"):].partition("/")
    for index, char in enumerate(rest):
        if char in "*?[":
            return bucket, rest[:index]
    return bucket, rest


def check_readable(path, what, checked=None):
    """GcsUnreachable naming `what` (e.g. "train_data_path") unless gs:// path's bucket can be
    listed now; a path without gs:// passes. checked: a set of buckets already probed."""
    if not str(path or "").startswith("gs://"):
        return
    bucket, prefix = split_gcs_path(str(path))
    if checked is not None and bucket in checked:
        return
    client = make_client(path, what)
    try:
        list(client.list_blobs(bucket, prefix=prefix, max_results=1, timeout=TIMEOUT_SECONDS, retry=None))
    except Exception as err:  # google.api_core, google.auth and requests errors, told apart below
        raise GcsUnreachable(f"{what}={path!r}: {describe(err, bucket)}") from None
    if checked is not None:
        checked.add(bucket)


def make_client(path, what):
    """A storage client: anonymous on an emulator, else Application Default Credentials."""
    from google.cloud import storage  # google-cloud-storage: only gs:// runs need it
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client()
    credentials, project = default_credentials(path, what)
    return storage.Client(project=project or "no-project", credentials=credentials)


def check_credentials(path, what):
    """GcsUnreachable naming `what` when gs:// path would be read without any Google Cloud
    credentials on this machine; else None (a local path, the emulator). No listing, and no
    TensorFlow: trainer.task asks it of a gs:// --output_dir before TensorFlow loads."""
    if str(path or "").startswith("gs://") and not os.environ.get("STORAGE_EMULATOR_HOST"):
        default_credentials(path, what)


def default_credentials(path, what):
    """(credentials, project) of Application Default Credentials; GcsUnreachable naming `what`
    and the login command when this machine has none."""
    import google.auth  # google-auth: only gs:// runs need it
    from google.auth import exceptions
    try:
        return google.auth.default()
    except exceptions.DefaultCredentialsError:
        raise GcsUnreachable(f"{what}={path!r}: no Google Cloud credentials on this machine: "
                             f"{LOGIN_FIX}") from None


def describe(err, bucket):
    """The likely cause of a failed listing, and its fix."""
    name = type(err).__name__
    if name == "NotFound":
        return f"no bucket named {bucket!r} (check the name and the project)"
    if name in ("Forbidden", "Unauthorized"):
        return f"these credentials may not list gs://{bucket} ({err.code}): {LOGIN_FIX} with an account that may"
    if name in ("RefreshError", "DefaultCredentialsError"):
        return f"the Google Cloud credentials were refused ({err}): {LOGIN_FIX}"
    return (f"cannot reach Cloud Storage within {TIMEOUT_SECONDS} s (no network?): {name}; check the "
            f"connection, or {LOGIN_FIX} if the credentials are missing")


def main(argv):
    try:
        check_readable(argv[1], "path")
    except GcsUnreachable as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print("ok")


if __name__ == "__main__":
    main(sys.argv)
