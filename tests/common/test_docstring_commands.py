"""Every module's docstring command points at what exists, and the ones that need no prepared
data, server or network run.

A module's docstring carries a command that runs it (the house rule). Read statically, for
all of them: a `python -m MODULE` names a module of the checkout or the venv, a pytest
command names test files that exist, and a `python -c` snippet compiles and takes from the
project only names its modules define. Run, in one child process of this venv (each snippet
in its own namespace, so TensorFlow loads once): every `-c` snippet that reads no OUT/,
work/ or other placeholder and starts no client of a server, and every `python -m` of a
project module whose arguments are no placeholders (--help, a sample table or line).

    .venv/bin/python -m pytest tests/common/test_docstring_commands.py
"""
import ast
import importlib.util
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from tests.user_commands import user_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "cloud", "common", "preprocess", "serving", "tests", "tools", "trainer")
# A snippet naming one of these reads an earlier run's files, a folder the user names, or a server.
NEEDS_MORE = ("OUT", "work/", "MODULE_DIR", "127.0.0.1", "/tmp/m/", "'DIR", "EXPORT")


def project_modules():
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def docstring_commands(path):
    """The indented command lines of path's module docstring, continuation lines joined."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    commands, pending = [], ""
    for line in doc.splitlines():
        if not line.startswith("    "):
            pending = ""
            continue
        text = pending + line.strip()
        pending = text[:-1] + " " if text.endswith("\\") else ""
        if not pending and not is_whole(text):  # a quoted string goes on, as a shell reads it
            pending = text + "\n"
        if not pending and re.search(r"(^|/)python(3[.0-9]*)? ", text.split("#")[0] + " "):
            commands.append(text)
    return commands


def is_whole(text):
    try:
        words_of(text)
    except ValueError:  # No closing quotation
        return False
    return True


def words_of(command):
    """The command's words, as a POSIX shell splits them (its # comment left out)."""
    return shlex.split(command, comments=True)


COMMANDS = [(path, command) for path in project_modules() for command in docstring_commands(path)]


def module_file(name):
    """The checkout's file of a dotted module name (a package's __init__.py), or None."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"):
        if path.is_file():
            return path
    return None


def defined_names(path):
    """The names a module's source binds at its top level (defs, classes, assignments, imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing_names(snippet):
    """'module.name' for each name a snippet takes from a project module that does not define it."""
    tree = ast.parse(snippet)
    aliases, missing = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in PACKAGES:
            source = module_file(node.module)
            for alias in node.names:
                submodule = module_file(f"{node.module}.{alias.name}")
                if submodule is not None:
                    aliases[alias.asname or alias.name] = submodule
                elif source is None or alias.name not in defined_names(source):
                    missing.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES and alias.asname:
                    aliases[alias.asname] = module_file(alias.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id) is not None
                and node.attr not in defined_names(aliases[node.value.id])):
            missing.append(f"{node.value.id}.{node.attr}")
    return missing


def problems_of(command):
    """What in one docstring command names something that does not exist."""
    try:
        words = words_of(command)
    except ValueError as err:
        return [f"does not parse as a shell command: {err}"]
    if "-c" in words:
        snippet = words[words.index("-c") + 1]
        try:
            compile(snippet, "<docstring>", "exec")
        except SyntaxError as err:
            return [f"does not compile: {err}"]
        return [f"{name} is not defined there" for name in missing_names(snippet)]
    if "-m" not in words:
        return [] if (ROOT / words[1]).exists() else [f"{words[1]} does not exist"]
    module = words[words.index("-m") + 1]
    if module == "pytest":
        tests = [w.split("::")[0] for w in words if w.startswith("tests/")]
        return [f"{t} does not exist" for t in tests if not (ROOT / t).exists()]
    if module_file(module) is None and importlib.util.find_spec(module.split(".")[0]) is None:
        return [f"module {module} does not exist"]
    return []


def test_every_module_with_code_carries_a_command_and_each_names_what_exists():
    assert len(COMMANDS) > 200  # the reader found them
    problems = [f"{path.relative_to(ROOT)}: {command[:90]}: {problem}"
                for path, command in COMMANDS for problem in problems_of(command)]
    assert problems == []


def test_a_command_naming_what_does_not_exist_is_found():
    assert problems_of('.venv/bin/python -c "from trainer.settings import dataset_info"') == [
        "trainer.settings.dataset_info is not defined there"]
    assert problems_of('.venv/bin/python -c "from common import signature as s; s.NO_SUCH"') == [
        "s.NO_SUCH is not defined there"]
    assert problems_of(".venv/bin/python -m pytest tests/no_such_test.py") == [
        "tests/no_such_test.py does not exist"]


# Words of a `python -m` command that mean a placeholder, a TPU or a cluster, an XLA compile
# (minutes), a shell redirection, or another tool.
COMMAND_NEEDS_MORE = ("...", "DATA", "DIR", "IMAGE", "BUCKET", "NAME", "photos", "some.", ".config",
                      "gs://", "--output", "TF_CONFIG", "JAX_", "TPU_", "-tpu/", "xla_check", ">",
                      " pip ", "tests.")


def is_quick(module, argv):
    """A benchmark runs for minutes: only its --help is run here (tests/bench runs each small)."""
    return not module.startswith("bench.") or argv == ["--help"]


def runnable_commands():
    """{label: what the runner runs} of the commands that need nothing prepared: a `-c` snippet,
    or a project module run as `python -m` with its arguments, with the exit codes it means."""
    runnable = {}
    for index, (path, command) in enumerate(COMMANDS):
        words = words_of(command)
        label = f"{path.relative_to(ROOT)}#{index}"
        if any(marker in command for marker in NEEDS_MORE) or "-m" not in words and "-c" not in words:
            continue
        if "-c" in words:
            snippet = words[words.index("-c") + 1]
            runnable[label] = {"code": snippet, "exits": [0, 2] if "exit_on_user_error" in snippet else [0]}
            continue
        module, argv = words[words.index("-m") + 1], words[words.index("-m") + 2:]
        if (module_file(module) is not None and is_quick(module, argv)
                and not any(marker in command for marker in COMMAND_NEEDS_MORE)):
            runnable[f"python -m {module} {' '.join(argv)}"] = {
                "module": module, "argv": argv, "exits": [0, 2] if "exit 2" in command else [0]}
    return runnable


# Runs each command in this one process (TensorFlow loads once): a snippet in its own namespace,
# a module as `python -m` runs it; prints {label: error or ""} as JSON.
RUNNER = """import contextlib, io, json, runpy, sys
results = {}
for label, item in json.loads(sys.stdin.read()).items():
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if "module" in item:
                sys.argv = [item["module"], *item["argv"]]
                runpy.run_module(item["module"], run_name="__main__", alter_sys=True)
            else:
                exec(compile(item["code"], label, "exec"), {"__name__": "__docstring__"})
        results[label] = ""
    except SystemExit as err:
        results[label] = "" if (err.code or 0) in item["exits"] else repr(err)
    except BaseException as err:
        results[label] = f"{type(err).__name__}: {err}"
print(json.dumps(results))
"""


@pytest.mark.process
def test_every_command_that_needs_nothing_prepared_runs():
    commands = runnable_commands()
    assert len(commands) >= 40
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(commands), text=True,
                            capture_output=True, cwd=ROOT, env=user_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = {name: error for name, error in json.loads(result.stdout.splitlines()[-1]).items() if error}
    assert failed == {}
