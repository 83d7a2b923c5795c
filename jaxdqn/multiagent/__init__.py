"""Multi-agent DQN, in one place: the environments (``envs``: RLlib's ``MultiAgentEnv`` as
functional, jittable dicts by agent id; ``MultiCartPole-v1``) and their worker (``worker``: the
single-agent policy bundle mapped over the policies, independent or lockstep replay). The plan,
the Trainer, checkpoints and the command are the single agent's: a single-agent run is a
multi-agent one with the policy ``default_policy``."""

from jaxdqn.multiagent.envs import (REGISTRY, JointState, MultiAgentEnv, MultiAgentSpec, MultiCartPole,
                                    is_multi_agent, make_multi_agent_env)
from jaxdqn.multiagent.worker import LOCKSTEP, is_multi_agent_config, make_worker

__all__ = ["LOCKSTEP", "REGISTRY", "JointState", "MultiAgentEnv", "MultiAgentSpec", "MultiCartPole",
           "is_multi_agent", "is_multi_agent_config", "make_multi_agent_env", "make_worker"]
