"""jaxdqn: RLlib's DQN and SimpleQ execution plans, JAX-native.

The package namespace is the public API: the pure core (configs, buffers, losses, ``make_train``)
and, loaded on first use so that importing the core never imports the shell, ``Trainer``.
"""

from typing import Any

from jaxdqn import buffers, losses, types
from jaxdqn.config import (DQNConfig, EvaluationConfig, ExplorationConfig, ModelConfig, OptimizerConfig,
                           SimpleQConfig)
from jaxdqn.errors import DamagedCheckpoint, Diverged, SaveError

__version__ = "0.1.0"

__all__ = [
    "register_env",
    "DQNConfig",
    "DamagedCheckpoint",
    "Diverged",
    "EvaluationConfig",
    "ExplorationConfig",
    "OptimizerConfig",
    "SaveError",
    "ModelConfig",
    "SimpleQConfig",
    "Trainer",
    "__version__",
    "buffers",
    "from_rllib",
    "losses",
    "make_train",
    "types",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the facade reaches the plan and the shell lazily (they import this package).
    if name == "Trainer":
        from jaxdqn.trainer import Trainer

        return Trainer
    if name == "from_rllib":
        from jaxdqn.rllib import from_rllib

        return from_rllib
    if name == "make_train":
        from jaxdqn.plan import make_train

        return make_train
    if name == "register_env":
        from jaxdqn.hostenv import register_env

        return register_env
    raise AttributeError(f"module 'jaxdqn' has no attribute {name!r}")
