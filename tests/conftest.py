"""Test-wide set-up: 4 forced CPU devices (before jax is imported) and a jit/eager fixture."""

import os
import shutil
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the session and its subprocesses: the Trainer, CLI and
# fresh-process tests compile the same plans many times; a cache hit is the same executable.
# The process that makes it (a plain run, or xdist's controller, whose workers inherit the
# variable) removes it when the session ends.
_OWN_CACHE_DIR = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE_DIR = tempfile.mkdtemp(prefix="jaxdqn-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE_DIR
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "jaxdqn",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("jaxdqn")


@pytest.fixture(params=["jit", "eager"])
def maybe_jit(request):
    """Run a kernel both compiled and op by op: the two must agree."""
    if request.param == "jit":
        return jax.jit
    return lambda f, **kwargs: f


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE_DIR is not None:
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)
