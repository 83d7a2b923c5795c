"""Static configuration: frozen, hashable dataclasses with RLlib's DQN / SimpleQ keys.

Field names and defaults follow RLlib's 1.x (execution-plan era) ``DEFAULT_CONFIG`` of DQN and
SimpleQ wherever RLlib has the key; ours are ``env``, ``env_params``, ``total_timesteps``,
``seed``, ``num_devices``, ``prng_impl``, ``td_error_loss_fn`` and ``grad_clip_mode``. Every
value is checked when a config is built: a bad one raises ``ValueError`` naming the key and
what is allowed, before anything compiles. ``jaxdqn.rllib.from_rllib(d)`` maps an RLlib dict.

- ``fields``: how a key is declared (its check and classification: traced, policy, resumable,
  RLlib's other names) and the one coercion of nested sections;
- ``sections``: RLlib's nested sections and the views of flat keys components take;
- ``dqn``: ``DQNConfig``, ``SimpleQConfig``, ``Hyperparams``, the dict round trip.
"""

from jaxdqn.config.dqn import (ALGOS, DEFAULT_POLICY, NESTED, RLLIB_RUN_NAMES, DQNConfig, GradClipMode, Hyperparams,
                               PrngImpl, SimpleQConfig, algo_of, atari_game, config_class, from_dict, to_dict,
                               traced_keys, view)
from jaxdqn.config.fields import classified
from jaxdqn.config.sections import (Activation, EvaluationConfig, ExplorationConfig, ExplorationType, LossConfig,
                                    LossFn, ModelConfig, MultiAgentConfig, OptimizerConfig, OptimizerType,
                                    QHeadConfig, ReplayMode)

__all__ = ["ALGOS", "DEFAULT_POLICY", "NESTED", "RLLIB_RUN_NAMES", "Activation", "DQNConfig", "EvaluationConfig",
           "ExplorationConfig", "ExplorationType", "GradClipMode", "Hyperparams", "LossConfig", "LossFn",
           "ModelConfig", "MultiAgentConfig", "OptimizerConfig", "OptimizerType", "PrngImpl", "QHeadConfig",
           "ReplayMode", "SimpleQConfig", "algo_of", "atari_game", "classified", "config_class", "from_dict",
           "to_dict", "traced_keys", "view"]
