"""jaxdqn: RLlib's DQN and SimpleQ execution plans, JAX-native."""

from jaxdqn import buffers, types

__version__ = "0.1.0"

__all__ = ["__version__", "buffers", "types"]
