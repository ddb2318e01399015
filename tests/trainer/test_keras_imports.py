"""The Keras engine runs where tf.estimator does not exist: nothing it imports reaches it.

TensorFlow 2.16 removed tf.estimator, and tensorflow-estimator 2.15 is its last release.
Read statically (ast, as tests/common/test_architecture.py reads every import), the
modules the Keras engine's command can load must not import trainer/estimator/ or
tensorflow_estimator, nor name tf.estimator: every module of trainer.keras, the shared
packages (settings, data, nets, objective, export, run, report, cloud, chain) and what
they import, plus the Keras branch of trainer.task's load_engine.

    .venv/bin/python -m pytest tests/trainer/test_keras_imports.py
"""
import ast

from tests.cloud.test_gcs_paths import dotted_name
from tests.common.test_architecture import ROOT, import_graph, imported_names, project_modules

ENGINE_NEUTRAL = ("trainer.keras", "trainer.settings", "trainer.data", "trainer.nets",
                  "trainer.objective", "trainer.export", "trainer.run", "trainer.report",
                  "trainer.cloud", "trainer.chain")
ESTIMATOR_ATTRIBUTES = ("tf.estimator", "tf.compat.v1.estimator", "tensorflow.estimator")


def reachable(starts, graph):
    """Every project module reachable from starts through imports (starts included)."""
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        if module not in seen and module in graph:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def keras_branch_imports():
    """The modules trainer/task.py's load_engine imports on its keras branch."""
    tree = ast.parse((ROOT / "trainer" / "task.py").read_text())
    load_engine = next(node for node in ast.walk(tree)
                       if isinstance(node, ast.FunctionDef) and node.name == "load_engine")
    branch = next(node for node in load_engine.body if isinstance(node, ast.If))
    return {f"{node.module}.{alias.name}" for statement in branch.body for node in ast.walk(statement)
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def problems_of(module, modules):
    """Imports of the Estimator engine or tensorflow_estimator, and uses of tf.estimator in code
    (comments and docstrings may name it)."""
    path = modules[module]
    found = [f"{module} imports {name}" for name in imported_names(path)
             if name.startswith(("trainer.estimator", "tensorflow_estimator"))]
    for node in ast.walk(ast.parse(path.read_text())):
        name = dotted_name(node) if isinstance(node, ast.Attribute) else None
        if name in ESTIMATOR_ATTRIBUTES:
            found.append(f"{module}:{node.lineno} uses {name}")
    return found


def test_the_keras_path_never_reaches_the_estimator():
    graph, modules = import_graph(), project_modules()
    starts = {m for m in modules if m.startswith(ENGINE_NEUTRAL)} | keras_branch_imports()
    closure = reachable(starts, graph)
    assert "trainer.keras.engine" in closure and "trainer.run.driver" in closure
    assert not any(m.startswith("trainer.estimator") for m in closure), sorted(
        m for m in closure if m.startswith("trainer.estimator"))
    bad = [problem for module in sorted(closure) for problem in problems_of(module, modules)]
    assert not bad, "\n".join(bad)


def test_the_check_can_fail():
    """The estimator branch of load_engine and the Estimator engine's modules are caught."""
    graph, modules = import_graph(), project_modules()
    assert keras_branch_imports() == {"trainer.keras.engine"}
    assert "trainer.estimator.cluster" in graph["trainer.task"]  # the other branch
    assert problems_of("trainer.estimator.model", modules)  # names tf.estimator
    assert any(m.startswith("trainer.estimator") for m in reachable({"trainer.task"}, graph))
