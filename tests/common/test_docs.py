"""The README and docs/ stay true to the checkout: size, links, modules, paths, tables of contents.

The README is an introduction (at most README_MAX_LINES lines); the rest lives in
docs/*.md. Every relative link or image must resolve (anchors to a heading of the
page they point to), every `python -m MODULE` of this project must exist, every
path of this repository named in the text must exist, and every long page of
docs/ starts with a table of contents.

    .venv/bin/python -m pytest -q tests/common/test_docs.py
"""
import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README_MAX_LINES = 350
LONG_PAGE_LINES = 80  # pages longer than this need a table of contents
# `python -m X` of other packages: their modules are not this checkout's to check.
FOREIGN_MODULES = ("apache_beam", "pip", "build", "pytest", "grpc_tools", "tensorboard", "venv",
                   "http", "json", "uv")
# Top-level folders of this repository: a path in the text starting with one must exist.
REPO_DIRS = ("common", "preprocess", "trainer", "serving", "bench", "tests", "tools", "cloud",
             "docs", ".ci")
# Paths in the text that name another repository's files (tensorflow/tpu's writers).
OTHER_REPOS_PATHS = {"tools/datasets/imagenet_to_gcs.py"}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PYTHON_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
REPO_PATH = re.compile(r"(?<![\w/.:$-])((?:%s)/[\w./*-]*)" % "|".join(re.escape(d) for d in REPO_DIRS))


def doc_pages():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def without_code(text):
    """The text without fenced code blocks, where `#` starts a shell comment, not a heading."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def heading_anchors(text):
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces -> '-'."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", without_code(text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(page, text):
    """Relative links and images of text (from page) whose file or #anchor does not exist."""
    broken = []
    for target in LINK.findall(without_code(text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:, file:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no file {linked})")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked.read_text()):
            broken.append(f"{target} (no heading #{anchor} in {linked.name})")
    return broken


def missing_modules(text, root=ROOT):
    """The `python -m` modules of text that are this project's and do not exist under root."""
    sys.path.insert(0, str(root))
    try:
        missing = []
        for name in sorted(set(PYTHON_M.findall(text))):
            if name.split(".")[0] in FOREIGN_MODULES or name.isupper():  # MODULE: a placeholder
                continue
            try:
                spec = importlib.util.find_spec(name)
            except ImportError:  # a parent package is missing
                spec = None
            if spec is not None and spec.submodule_search_locations is not None:
                spec = importlib.util.find_spec(f"{name}.__main__")  # `-m package` runs its __main__
            if spec is None or not (spec.origin or "").startswith(str(root)):
                missing.append(name)
        return missing
    finally:
        sys.path.remove(str(root))


def missing_paths(text, root=ROOT):
    """Paths of this repository named in text (`trainer/settings/table.py`) that do not exist."""
    missing = []
    for path in sorted(set(REPO_PATH.findall(text))):
        path = path.rstrip(".")
        if path in OTHER_REPOS_PATHS:
            continue
        if not (list(root.glob(path)) if "*" in path else (root / path).exists()):
            missing.append(path)
    return missing


def table_of_contents_problems(text):
    """'## section' headings that the lines before the first of them do not link to."""
    body = without_code(text)
    sections = re.findall(r"^## +(.+?) *$", body, flags=re.M)
    if not sections:
        return ["no '## ' sections to list"]
    top = body.split(f"\n## {sections[0]}", 1)[0]
    linked = set(re.findall(r"\]\(#([^)]+)\)", top))
    anchors = sorted(heading_anchors("\n".join(f"## {s}" for s in sections)))
    return [f"#{anchor}" for anchor in anchors if anchor not in linked]


def page_id(page):
    return str(page.relative_to(ROOT))


def test_readme_is_an_introduction():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details to docs/"


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_links_and_images_resolve(page):
    assert not broken_links(page, page.read_text())


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_python_m_modules_exist(page):
    assert not missing_modules(page.read_text())


@pytest.mark.parametrize("page", doc_pages(), ids=page_id)
def test_repository_paths_exist(page):
    assert not missing_paths(page.read_text())


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=page_id)
def test_long_pages_open_with_a_table_of_contents(page):
    text = page.read_text()
    if text.count("\n") > LONG_PAGE_LINES:
        assert not table_of_contents_problems(text), "table of contents lacks sections"


def test_readme_links_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for target in LINK.findall((ROOT / "README.md").read_text())}
    assert not [page.name for page in (ROOT / "docs").glob("*.md") if page not in linked]


@pytest.mark.parametrize("check, text, expected", [
    (lambda t: broken_links(ROOT / "README.md", t), "[a](docs/nope.md) ![b](docs/report.png)",
     ["docs/nope.md (no file %s)" % (ROOT / "docs/nope.md")]),
    (lambda t: broken_links(ROOT / "README.md", t), "[a](#nope) [b](#layout)",
     ["#nope (no heading #nope in README.md)"]),
    (missing_modules, "python -m trainer.nope; python -m trainer.report; python -m pip; "
                      "python -m trainer.estimator", ["trainer.estimator", "trainer.nope"]),
    (missing_paths, "`trainer/settings/config.py`, trainer/settings/table.py, bench/bench_*.py, "
                    "gs://B/tests/x.py", ["trainer/settings/config.py"]),
    (table_of_contents_problems, "# T\n\n- [A](#a)\n\n## A\n\n## B: `x.y`\n", ["#b-xy"]),
])
def test_each_check_can_fail(check, text, expected):
    assert check(text) == expected
