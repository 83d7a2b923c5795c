"""jaxdqn: RLlib's DQN and SimpleQ execution plans, JAX-native."""

from jaxdqn import buffers, losses, types
from jaxdqn.config import DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig

__version__ = "0.1.0"

__all__ = [
    "DQNConfig",
    "ExplorationConfig",
    "ModelConfig",
    "SimpleQConfig",
    "__version__",
    "buffers",
    "losses",
    "types",
]
