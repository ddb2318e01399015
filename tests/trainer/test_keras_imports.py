"""The Keras engine runs where tf.estimator does not exist: nothing it imports reaches it.

TensorFlow 2.16 removed tf.estimator, and tensorflow-estimator 2.15 is its last release.
Read statically (ast, as tests/common/test_architecture.py reads every import), the
modules the Keras engine's command can load must not import trainer/estimator/ or
tensorflow_estimator, nor name tf.estimator: every module of trainer.keras, the shared
packages (settings, data, nets, objective, export, run, report, cloud, chain) and what
they import, plus the Keras branch of trainer.task's load_engine. Where tensorflow-estimator
is not installed (.venv-keras), --engine estimator refuses in one line naming the flag, before
TensorFlow loads.

    .venv/bin/python -m pytest tests/trainer/test_keras_imports.py
    .venv-keras/bin/python -m pytest tests/trainer/test_keras_imports.py
"""
import ast

import pytest

from tests.cloud.test_gcs_paths import dotted_name
from tests.engines import HAS_ESTIMATOR
from tests.common.test_architecture import ROOT, import_graph, imported_names, project_modules
from tests.user_commands import error_lines, run, run_trainer, user_env

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
    # By package: trainer.export_tflite (an entry point that may make either engine) is not trainer.export.
    starts = {m for m in modules if any(m == p or m.startswith(p + ".") for p in ENGINE_NEUTRAL)}
    starts |= keras_branch_imports()
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


def test_the_estimator_engine_refuses_in_one_line_without_tensorflow_estimator(tiny_argv, tmp_path,
                                                                               monkeypatch, capsys):
    from trainer import task
    monkeypatch.setattr(task, "is_estimator_installed", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        task.main(tiny_argv + ["--engine=estimator"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"error: {task.ESTIMATOR_MISSING}"
    assert "--engine keras" in task.ESTIMATOR_MISSING and not (tmp_path / "out").exists()


@pytest.mark.process
@pytest.mark.skipif(HAS_ESTIMATOR, reason="tensorflow-estimator is installed: runs in .venv-keras (make test-keras)")
def test_the_default_engine_refuses_where_tensorflow_estimator_is_missing(tiny_argv, tmp_path):
    """The real command in .venv-keras, the Estimator engine being the default: exit 2, one line,
    before TensorFlow loads (a tensorflow that cannot be imported is all it finds)."""
    result = run_trainer(*tiny_argv, env=user_env(without_tensorflow=True), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert error_lines(result)[-1] == (
        "error: --engine estimator needs tensorflow-estimator (TensorFlow <= 2.15), not installed here: "
        "use --engine keras or the .venv environment")
    assert result.stdout == "" and not (tmp_path / "out").exists()


@pytest.mark.process
@pytest.mark.skipif(HAS_ESTIMATOR, reason="tensorflow-estimator is installed: runs in .venv-keras (make test-keras)")
def test_the_estimator_xla_check_refuses_where_tensorflow_estimator_is_missing():
    """python -m trainer.estimator.xla_check in .venv-keras: one line naming the Keras engine's check."""
    result = run("trainer.estimator.xla_check", "--model", "small_cnn", timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert error_lines(result) == [
        "error: python -m trainer.estimator.xla_check needs tensorflow-estimator (TensorFlow <= 2.15), "
        "not installed here: use the .venv environment, or python -m trainer.keras.xla_check for the "
        "Keras engine"]
