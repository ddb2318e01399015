"""common/first_import.py: a heavy library's first import runs without the cyclic collector, which
then collects once and freezes what the import left; a failed import leaves the collector as it
was; every command's quiet_libraries pauses it for the heavy libraries.

Each case runs in a fresh interpreter: the collector's state is the process's.

    .venv/bin/python -m pytest tests/common/test_first_import.py
"""
import json
import subprocess
import sys

import pytest

from common import first_import

pytestmark = pytest.mark.process

# outer_probe imports inner_probe: both run paused, the collector runs again after the outer one.
PROBES = {
    "outer_probe.py": "import gc\nBEFORE = gc.isenabled()\nimport inner_probe\nAFTER_INNER = gc.isenabled()\n"
                      "MADE = [[i] for i in range(20000)]\n",
    "inner_probe.py": "import gc\nENABLED = gc.isenabled()\n",
    "broken_probe.py": "import gc\nraise ValueError('broken at import')\n",
}
SCRIPT = """
import gc, json, sys
from common import first_import
first_import.uncollected_imports(["outer_probe", "inner_probe", "broken_probe"])
frozen = gc.get_freeze_count()
import outer_probe
seen = dict(outer=outer_probe.BEFORE, inner=__import__("inner_probe").ENABLED,
            after_inner=outer_probe.AFTER_INNER, after=gc.isenabled(),
            frozen=gc.get_freeze_count() - frozen)
frozen = gc.get_freeze_count()
try:
    import broken_probe
except ValueError:
    seen.update(after_failure=gc.isenabled(), frozen_by_failure=gc.get_freeze_count() - frozen)
seen["hooks_left"] = [f.name for f in sys.meta_path if isinstance(f, first_import.FirstImport)]
print(json.dumps(seen))
"""


def run_python(script, tmp_path, repo_root):
    env = {"PYTHONPATH": f"{tmp_path}:{repo_root}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_import_runs_without_the_collector_then_what_it_made_is_frozen(tmp_path, repo_root):
    for name, code in PROBES.items():
        (tmp_path / name).write_text(code)
    seen = run_python(SCRIPT, tmp_path, repo_root)
    assert (seen["outer"], seen["inner"], seen["after_inner"]) == (False, False, False)
    assert seen["after"] is True and seen["frozen"] >= 20000  # the 20,000 lists among them
    assert seen["after_failure"] is True and seen["frozen_by_failure"] <= 0  # (a frozen object may go)
    assert seen["hooks_left"] == []  # each hook answers the first import only


def test_every_command_imports_the_heavy_libraries_uncollected(tmp_path, repo_root):
    """quiet_libraries (which every entry point runs before TensorFlow loads, at any verbosity)
    puts the hook before each heavy library's first import."""
    script = ("import json, sys; from common import console, first_import; console.quiet_libraries(2); "
              "print(json.dumps(sorted(f.name for f in sys.meta_path if isinstance(f, first_import.FirstImport)"
              " and f.context is first_import.collections_paused)))")
    assert run_python(script, tmp_path, repo_root) == sorted(first_import.HEAVY_LIBRARIES)
