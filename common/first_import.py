"""A library's first import, run inside a context of the caller's: with Python's cyclic garbage
collector paused (every command, for the heavy libraries) or with stderr's descriptor muted
(common/console.py, at verbosity 0).

TensorFlow's import makes hundreds of thousands of objects that live as long as the process, and
the collector, triggered every 700 new objects, scans them again and again while they are made:
a third of the import's CPU (TensorFlow 2.15's with the Estimator: 4.1 s of user time, 2.7 s
with the collector paused).
uncollected_imports() pauses it through the first import of each heavy library, then collects
once (the import's own garbage) and freezes what is left (gc.freeze: later full collections
skip it). Figures and their command: docs/benchmarks.md, "Measured figures behind choices in the
code".

    .venv/bin/python -c "from common import first_import; first_import.uncollected_imports(); import tensorflow"
"""
import contextlib
import gc
import importlib.abc
import importlib.util
import sys

# The libraries whose import is most of a command's start (TensorFlow, Beam, JAX and Keras 3).
HEAVY_LIBRARIES = ("tensorflow", "apache_beam", "jax", "keras")
_PAUSED = {"depth": 0}  # imports inside a paused one (Keras 3 imports JAX) leave it paused


def around_first_import(name, context):
    """The first import of top-level module `name` (if it is not imported yet) runs its module
    code inside context(), a context manager factory; every later import is Python's own."""
    if name not in sys.modules and not any(
            isinstance(finder, FirstImport) and finder.name == name and finder.context is context
            for finder in sys.meta_path):
        sys.meta_path.insert(0, FirstImport(name, context))


def uncollected_imports(names=HEAVY_LIBRARIES):
    """The heavy libraries' first imports without the collector (collections_paused)."""
    for name in names:
        around_first_import(name, collections_paused)


@contextlib.contextmanager
def collections_paused():
    """The collector off while the block runs; after the outermost block it collects once and
    freezes what survived (all of it the process's from then on), then runs again. An import that
    fails leaves the collector as it found it, nothing frozen."""
    was_enabled = gc.isenabled()
    _PAUSED["depth"] += 1
    gc.disable()
    completed = False
    try:
        yield
        completed = True
    finally:
        _PAUSED["depth"] -= 1
        if _PAUSED["depth"] == 0 and was_enabled:
            if completed:
                gc.collect()
                gc.freeze()
            gc.enable()


class FirstImport(importlib.abc.MetaPathFinder):
    """Finds module `name` as the other finders do; its loader runs inside context()."""

    def __init__(self, name, context):
        self.name, self.context = name, context

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the other finders answer, and every later import
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = LoaderInside(spec.loader, self.context)
        return spec


class LoaderInside(importlib.abc.Loader):
    """Delegates to the real loader; exec_module inside context()."""

    def __init__(self, loader, context):
        self.loader, self.context = loader, context

    def __getattr__(self, attribute):  # get_filename, get_resource_reader, is_package, ...
        return getattr(self.loader, attribute)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with self.context():
            self.loader.exec_module(module)
