"""The import rule: each stage imports only itself and `common`; no module imports in a circle.

Data flows CSV -> preprocess -> TFRecords -> trainer -> SavedModel -> serving, and so do
the imports: preprocess/, trainer/ and serving/ stand side by side above common/.
Every import counts, at module level or inside a function.

    .venv/bin/python -m pytest tests/common/test_architecture.py
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
STAGES = ("preprocess", "trainer", "serving")
SHARED = "common"
PROJECT_PACKAGES = STAGES + (SHARED, "bench", "tests")


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules():
    """{module name: path} of every .py in the stage packages and common/."""
    return {module_name(path): path
            for package in STAGES + (SHARED,) for path in sorted((ROOT / package).rglob("*.py"))}


def imported_names(path):
    """Absolute module names path imports, at any depth (relative imports resolved)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            # `from pkg import mod` imports pkg.mod when mod is a module.
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def project_imports(path, modules):
    """The project modules path imports (an imported package counts as its __init__)."""
    found = set()
    for name in imported_names(path):
        if name.split(".")[0] not in PROJECT_PACKAGES:
            continue
        while name and name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in modules or name.split(".")[0] in ("bench", "tests"):
            found.add(name)
    return found


def import_graph():
    modules = project_modules()
    return {name: project_imports(path, modules) - {name} for name, path in modules.items()}


def find_cycle(graph):
    """One import cycle as a list of modules, or None (iterative DFS with colours)."""
    colour = dict.fromkeys(graph, 0)  # 0 unseen, 1 on the stack, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c in graph), None)
            if child is None:
                colour[node] = 2
                stack.pop()
            elif colour[child] == 1:
                path = [n for n, _ in stack]
                return path[path.index(child):] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_the_graph_sees_imports_inside_functions():
    """The check can fail: it finds a delayed import, a relative import and a package import."""
    graph = import_graph()
    assert "common.signature" in graph["trainer.estimator.model"]
    assert "trainer.chain" in graph["trainer.task"]  # imported inside main()
    assert graph["common.signature"] == set()
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_only_itself_and_common(stage):
    allowed = {stage, SHARED}
    bad = sorted(f"{module} imports {imported}"
                 for module, imports in import_graph().items() if module.split(".")[0] == stage
                 for imported in imports if imported.split(".")[0] not in allowed)
    assert not bad, "\n".join(bad)


def test_common_imports_no_stage():
    bad = sorted(f"{module} imports {imported}"
                 for module, imports in import_graph().items() if module.startswith(SHARED)
                 for imported in imports if imported.split(".")[0] != SHARED)
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


# The rooms of trainer/ (its subpackages, and its two top-level modules) from the lowest up.
# A room imports only rooms of a lower rank: settings at the bottom; the definitions both
# engines share; the networks; the run directory's contract; the params chain; the engines
# and the report; the entry points. docs/development.md#layout-rules says why.
TRAINER_RANKS = {
    "settings": 0,
    "objective": 1, "data": 1, "export": 1,
    "nets": 2, "cloud": 2,  # cloud/xla.py builds a training batch as the input sends it (data/mix.py)
    "run": 3,
    "chain": 4,
    "estimator": 5, "keras": 5, "report": 5,
    "jax": 6,  # the JAX engine exports and predicts through the Keras engine's tf-keras code
    "task": 7,
    "export_tflite": 8,  # an entry point that makes the run's engine the way task does
}


def room_of(module):
    """'trainer.run.driver' -> 'run', 'trainer.chain' -> 'chain'; None outside trainer/ and for
    trainer/__init__.py (a caption, importing nothing)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "trainer" and len(parts) > 1 else None


def upward_edges(graph, ranks):
    """'importer -> imported' for every import between two rooms that does not go to a lower rank."""
    return sorted(f"{module} ({room_of(module)}) -> {imported} ({room_of(imported)})"
                  for module, imports in graph.items() if room_of(module)
                  for imported in imports
                  if room_of(imported) and room_of(imported) != room_of(module)
                  and ranks[room_of(imported)] >= ranks[room_of(module)])


def test_every_trainer_room_has_a_rank():
    rooms = {room_of(module) for module in import_graph()} - {None}
    assert rooms == set(TRAINER_RANKS), f"rank these rooms in TRAINER_RANKS: {rooms - set(TRAINER_RANKS)}"


def test_the_rank_check_can_fail():
    graph = {"trainer.run.a": {"trainer.report.b"}, "trainer.report.b": {"trainer.run.a"},
             "trainer.chain": {"trainer.settings.c"}, "trainer.settings.c": set()}
    assert upward_edges(graph, TRAINER_RANKS) == ["trainer.run.a (run) -> trainer.report.b (report)"]
    assert upward_edges({"trainer.keras.a": {"trainer.estimator.b"}}, TRAINER_RANKS)  # same rank


def test_trainer_rooms_import_only_lower_rooms():
    """No import runs back up, nor sideways between two rooms of one rank: the rooms form no cycle."""
    bad = upward_edges(import_graph(), TRAINER_RANKS)
    assert not bad, "\n".join(bad)


def layout_block():
    """The code block of README.md's "## Layout" section."""
    text = (ROOT / "README.md").read_text().split("\n## Layout\n", 1)[1]
    return text.split("```", 2)[1]


def test_readme_layout_lists_every_module_and_no_stale_one():
    import fnmatch
    import re
    names = set(re.findall(r"[\w*]+\.py", layout_block()))
    modules = [path for package in STAGES + (SHARED,) for path in (ROOT / package).rglob("*.py")
               if path.name != "__init__.py"]
    missing = sorted(str(p.relative_to(ROOT)) for p in modules
                     if not any(fnmatch.fnmatch(p.name, name) for name in names))
    stale = sorted(name for name in names
                   if not any(fnmatch.fnmatch(p.name, name) for p in modules)
                   and not list(ROOT.glob(f"*/{name}")) and not (ROOT / name).exists())
    assert not missing, f"README Layout does not list: {missing}"
    assert not stale, f"README Layout lists files that do not exist: {stale}"


# issue 34: a development server furnished for fidelity, not for speed; issue 46 added 37 lines
# for a stop that answers every request received, which TF Serving (it ends at once) lacks.
STANDIN_MAX_LINES = 3540


def test_the_standin_stays_furnished_for_its_purpose():
    lines = {path.name: len(path.read_text().splitlines())
             for path in (ROOT / "serving" / "standin").glob("*.py")}
    largest = sorted(lines, key=lines.get, reverse=True)[:3]
    assert sum(lines.values()) <= STANDIN_MAX_LINES, (
        f"serving/standin/ has {sum(lines.values())} lines, over {STANDIN_MAX_LINES}; largest: "
        f"{', '.join(f'{name} {lines[name]}' for name in largest)}. Merge or drop what TF "
        "Serving's fidelity does not need (docs/serving.md lists it) before adding more")
