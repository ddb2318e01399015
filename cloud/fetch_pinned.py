"""Downloads one pinned file for a container build and keeps it only if its sha256 matches.

The Dockerfile's TPU runtime pieces come from Google's Cloud TPU artifacts, not from
a package index (the TensorFlow build for TPU VMs, libtpu.so), so pip's
--require-hashes cannot guard them; this does:

    python cloud/fetch_pinned.py URL SHA256 DEST

DEST ending in "/" keeps the URL's file name in that folder (pip needs a wheel's own
name); otherwise DEST is the file (/lib/libtpu.so). A sha256 still reading FILL_IN
stops the build naming the URL to hash; a mismatch stops it naming both hashes.
Nothing unverified lands in the image. Exit code 2 and one line for either.
"""
import hashlib
import os
import re
import sys
import tempfile
import urllib.parse
import urllib.request

PLACEHOLDER = "FILL_IN"
CHUNK_BYTES = 1 << 20  # the TensorFlow wheel is about 0.5 GB: hash it while it streams to disk


class PinError(ValueError):
    """The pinned hash is missing or does not match what the URL served."""


def destination(url, dest):
    if dest.endswith("/"):
        return os.path.join(dest, os.path.basename(urllib.parse.urlparse(url).path))
    return dest


def fetch(url, sha256, dest, opener=urllib.request.urlopen):
    """Downloads url to dest (see destination) if its sha256 is the pinned one; returns the path."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise PinError(f"{url}: no sha256 pinned (got {sha256!r}): download it once, run "
                       f"sha256sum on it and pass the hash as the --build-arg beside this URL")
    path = destination(url, dest)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    digest = hashlib.sha256()
    with opener(url) as response, tempfile.NamedTemporaryFile(
            dir=os.path.dirname(path) or ".", delete=False) as part:
        while chunk := response.read(CHUNK_BYTES):
            digest.update(chunk)
            part.write(chunk)
    if digest.hexdigest() != sha256:
        os.unlink(part.name)
        raise PinError(f"{url}: sha256 {digest.hexdigest()}, pinned {sha256}")
    os.replace(part.name, path)
    return path


def main(argv=None):
    url, sha256, dest = sys.argv[1:] if argv is None else argv
    try:
        print(fetch(url, sha256, dest), flush=True)
    except PinError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
