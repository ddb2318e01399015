"""The JAX engine's tests collect only where it runs (.venv-jax, make test-jax): elsewhere
`import jax` or Keras 3's backend would fail at collection (tests/engines.py HAS_JAX)."""
from tests.engines import HAS_JAX

collect_ignore_glob = [] if HAS_JAX else ["test_*.py"]
