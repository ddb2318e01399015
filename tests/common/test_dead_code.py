"""No dead code: every module-level function of the product is called (or named) by other
product code, a doc, a Makefile or a config, not only by its own definition or by tests.

A vulture-style check by name: a function whose name appears nowhere but at its `def` (and in
tests) is dead, or kept only for its tests; delete it, or use it where the product needs it.
Names are whole identifiers, so a common name (run, main) passes wherever it is used; what
this catches is the forgotten helper with a name of its own.

    .venv/bin/python -m pytest tests/common/test_dead_code.py
"""
import ast
import collections
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ("common/", "preprocess/", "trainer/", "serving/", "bench/", "tools/")
GENERATED = {"work", "data", "runs", "dist", "build"}  # .gitignore's generated top-level folders
READ = (".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".cfg", ".toml", ".ini", "Makefile", "Dockerfile")


def tracked_texts():
    """{path: text} of the checkout's files a name can be used in (read from the tree, not from
    git: the fast suite starts no process), the environments and generated folders left out."""
    texts = {}
    for directory, subdirs, names in os.walk(ROOT):
        top = pathlib.Path(directory) == ROOT  # work/, data/ ... at the top are generated
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d != "__pycache__"
                      and not (top and d in GENERATED) and not d.endswith(".egg-info")]
        for name in names:
            path = pathlib.Path(directory, name)
            if name.endswith(READ) and path.is_file():
                texts[path.relative_to(ROOT).as_posix()] = path.read_text(errors="replace")
    return texts


def module_functions(texts):
    """(path, name, line) of every module-level function of the product (dunders aside)."""
    for path, text in texts.items():
        if path.startswith(PRODUCT) and path.endswith(".py"):
            for node in ast.parse(text).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__"):
                    yield path, node.name, node.lineno


def unused_functions(texts):
    """'path:line name (why)' of each function nothing but its def and tests name."""
    files_naming = collections.defaultdict(set)
    for path, text in texts.items():
        for word in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)):
            files_naming[word].add(path)
    unused = []
    for path, name, line in module_functions(texts):
        in_own_file = len(re.findall(rf"\b{name}\b", texts[path]))
        elsewhere = files_naming[name] - {path}
        if in_own_file <= 1 and all(other.startswith("tests/") for other in elsewhere):
            why = "only tests call it" if elsewhere else "nothing calls it"
            unused.append(f"{path}:{line} {name} ({why})")
    return unused


def test_every_module_level_function_is_used_by_the_product():
    assert unused_functions(tracked_texts()) == []


def test_the_check_finds_a_function_nothing_calls_and_one_only_tests_call():
    texts = {"common/a.py": "def used():\n    pass\n\n\ndef forgotten():\n    pass\n\n\ndef tested():\n    pass\n",
             "serving/b.py": "from common.a import used\nused()\n",
             "tests/test_a.py": "from common.a import tested\ntested()\n"}
    assert unused_functions(texts) == ["common/a.py:5 forgotten (nothing calls it)",
                                       "common/a.py:9 tested (only tests call it)"]
