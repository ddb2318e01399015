"""make test hands out its longest files first (tests/longest_files.txt, tests/conftest.py).

Each listed path is a test file that exists, with its seconds; the collection puts the listed
files first, longest first, each file's tests in their order; and the Makefile's workers keep
that order (without --no-loadscope-reorder, xdist orders files by their number of tests and
hands the long files of one or two tests out last: the list did nothing until 2026-11-29).

    .venv/bin/python -m pytest tests/common/test_test_order.py
"""
import pathlib
import re
import types

from tests import conftest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_each_listed_file_exists_with_its_seconds():
    entries = [line.split("#")[0].split() for line in conftest.LONGEST_FILES_LIST.read_text().splitlines()
               if line.split("#")[0].strip()]
    assert len(entries) > 10
    for seconds, path in entries:
        assert float(seconds) > 0, path
        assert (ROOT / path).is_file() and re.fullmatch(r"tests/.+/test_\w+\.py", path), path
    assert len({path for _, path in entries}) == len(entries)


def test_the_listed_files_come_first_longest_first(tmp_path):
    listing = tmp_path / "longest_files.txt"
    listing.write_text("# seconds  path\n  5  tests/b.py\n 40  tests/c.py  # the longest\n")
    rank = conftest.longest_files(listing)
    assert rank == {"tests/c.py": 0, "tests/b.py": 1}
    items = [types.SimpleNamespace(nodeid=f"tests/{name}::test_{i}")
             for i, name in enumerate(["a.py", "b.py", "c.py", "a.py", "c.py"])]
    conftest.sort_longest_first(items, rank)
    assert [item.nodeid for item in items] == [
        "tests/c.py::test_2", "tests/c.py::test_4", "tests/b.py::test_1",
        "tests/a.py::test_0", "tests/a.py::test_3"]


def test_the_makefile_workers_keep_the_order():
    workers = re.search(r"^PYTEST_WORKERS \?=(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "--dist loadfile" in workers and "--no-loadscope-reorder" in workers.split()
