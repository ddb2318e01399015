"""The .venv-keras selection (tests/keras_env.txt, run by make test-keras) is real and collects there.

Each listed path exists and says why it runs there too (what depends on TensorFlow 2.20 or
the Estimator's absence: the Keras engine, exports across versions, the TPU lock); and no
module it collects (nor a tests module those import) reaches the Estimator while being imported: an Estimator import
at module level, or tf.estimator used outside a function, would fail the whole file's
collection where TensorFlow 2.16+ has no tf.estimator. Tests that need the Estimator import
it inside the test and carry tests/engines.py's needs_estimator.

    .venv/bin/python -m pytest tests/common/test_keras_env.py
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SELECTION = ROOT / "tests" / "keras_env.txt"
REQUIRED = {"tests/common/test_keras_env.py", "tests/trainer/test_keras_engine.py",
            "tests/trainer/test_keras_imports.py", "tests/cloud/test_tpu_lock.py",
            "tests/serving/test_cross_version_export.py"}
ESTIMATOR_MODULES = ("trainer.estimator", "tensorflow_estimator")


def selection_lines():
    """(path, reason) of each entry: `path  # why it runs in .venv-keras too`."""
    entries = [line.partition("#") for line in SELECTION.read_text().splitlines()]
    return [(path.strip(), reason.strip()) for path, _, reason in entries if path.strip()]


def selected_paths():
    return [path for path, _ in selection_lines()]


def collected_files(paths):
    files = set()
    for path in map(ROOT.joinpath, paths):
        files.update(path.rglob("*.py") if path.is_dir() else [path])
    return files | {ROOT / "tests" / "conftest.py"}


def module_level_problems(path):
    """(problems, tests modules imported) of the statements run when the file is imported."""
    problems, tests_imports = [], set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.ClassDef):
            todo.extend(node.body)
            continue
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        problems += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                     if n.startswith(ESTIMATOR_MODULES)]
        tests_imports.update(n for n in names if n.startswith("tests."))
        if isinstance(node, ast.Attribute) and ast.unparse(node) in ("tf.estimator", "tensorflow.estimator"):
            problems.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {ast.unparse(node)}")
        todo.extend(ast.iter_child_nodes(node))
    return problems, tests_imports


def test_the_selection_lists_existing_paths_and_what_must_run_without_the_estimator():
    paths = selected_paths()
    assert not [p for p in paths if not (ROOT / p).exists()]
    assert REQUIRED <= set(paths), REQUIRED - set(paths)
    assert len(paths) == len(set(paths))


def test_each_entry_says_why_it_runs_in_the_keras_environment_too():
    assert [path for path, reason in selection_lines() if len(reason.split()) < 3] == []


def test_nothing_the_selection_imports_reaches_the_estimator_at_import_time():
    todo, seen, problems = list(collected_files(selected_paths())), set(), []
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        found, tests_imports = module_level_problems(path)
        problems += found
        todo += [ROOT.joinpath(*name.split(".")).with_suffix(".py") for name in tests_imports]
    assert ROOT / "tests" / "trainer" / "run_checks.py" in seen  # followed tests.* imports
    assert not problems, "\n".join(problems)


def test_the_check_can_fail():
    problems, _ = module_level_problems(ROOT / "tests" / "trainer" / "test_estimator_engine.py")
    assert any("imports trainer.estimator" in p for p in problems)
    assert any("uses tf.estimator" in p for p in problems)
