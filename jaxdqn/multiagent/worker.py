"""The worker of a multi-agent env: the single-agent pieces mapped over the policies.

- ``config.multiagent.policies`` are independent learners, one ``policy.Policy`` bundle each
  (a policy may override the config's ``policy`` keys, such as ``lr`` or ``model``).
  ``policy_mapping_fn`` maps every agent to a policy once, statically; agents of one policy
  share its network and its replay.
- Each env step every agent acts with its policy (epsilon-greedy on the shared schedule); each
  agent's steps become n-step transitions exactly as for one agent. With the env's
  ``done_when="all"`` (RLlib's), the steps of an agent that has finished its episode while
  others play on are not stored (a masked ``add``).
- ``replay_mode="independent"``: one buffer per policy that receives the transitions of its
  agents; each replay step, every trained policy samples its own batch.
- ``replay_mode="lockstep"``: one uniform buffer (id ``LOCKSTEP``) of joint steps (a dict agent
  -> transition per item); every policy samples it with the same key, so all train on the same
  joint steps, each on its agents' transitions (RLlib refuses prioritized replay here, and so
  do we).
- Reports: RLlib's joint ``episode_reward_mean`` (the agents' returns summed) and
  ``policy_reward_mean/<pid>`` (``/min``, ``/max``: one entry per agent episode).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxdqn import evaluation, policy, rollout
from jaxdqn.config import DQNConfig, Hyperparams, MultiAgentConfig
from jaxdqn.multiagent import envs
from jaxdqn.types import ReplayBuffer, Sample
from jaxdqn.worker import Worker, evaluation_act, host_evaluation, make_buffer, reward_view

Array = jax.Array
LOCKSTEP = "lockstep"  # the id of lockstep replay's one joint buffer


def is_multi_agent_config(config: DQNConfig) -> bool:
    """A ``multiagent`` section, or a multi-agent environment (then one shared policy)."""
    return config.multiagent is not None or envs.is_multi_agent(config.env)


def agent_groups(spec: envs.MultiAgentSpec, multi: MultiAgentConfig) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """``(agent -> policy, policy -> its agents)``; refuses a policy without agents or with
    agents of different spaces."""
    mapping = multi.policy_of(spec.agents)
    groups = {pid: tuple(a for a in spec.agents if mapping[a] == pid) for pid in multi.policy_ids}
    for pid, agents in groups.items():
        if not agents:
            raise ValueError(f"multiagent.policies: policy {pid!r} has no agent (policy_mapping_fn maps "
                             f"{dict(mapping)}); remove it or map an agent to it")
        if len({(spec.obs_shapes[a], spec.num_actions[a]) for a in agents}) > 1:
            raise ValueError(f"multiagent.policy_mapping_fn maps agents {list(agents)} with different observation "
                             f"or action spaces to policy {pid!r}; one policy needs one network shape")
    return mapping, groups


def lockstep_view(joint: ReplayBuffer, agents: tuple[str, ...]) -> ReplayBuffer:
    """The joint buffer as one policy replays it: its agents' transitions at the sampled joint
    steps, ``[B * k]`` for ``k`` agents."""

    def sample(state: Any, key: Array, batch_size: int, beta: Any = 0.0) -> Sample:
        s = joint.sample(state, key, batch_size, beta)
        items = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *[s.items[a] for a in agents])
        return Sample(items=items, indices=jnp.tile(s.indices, len(agents)), weights=jnp.tile(s.weights, len(agents)))

    return joint._replace(sample=sample)


def make_worker(config: DQNConfig, hyper: Hyperparams, *, num_envs: int, buffer_size: int,
                axis_name: str | None = None, spec: envs.MultiAgentSpec | None = None) -> Worker:
    """The worker of a multi-agent env with ``num_envs`` envs and buffers of ``buffer_size``
    items (per replica); see the module docstring. Refusals name the key. ``spec``: the env's
    where the shell made it; one whose ``env`` is None steps on the host (``envs.host_spec``:
    its fragments come to the plan's ``take``; no env functions, no evaluation here)."""
    multi = config.multiagent or MultiAgentConfig()
    spec = envs.make_multi_agent_env(config.env, config.env_params) if spec is None else spec
    mapping, groups = agent_groups(spec, multi)
    lockstep = multi.replay_mode == "lockstep"
    every_step_acts = spec.done_when == "any"  # "all": finished agents skip steps until the joint end
    if lockstep and not every_step_acts:
        raise ValueError("multiagent.replay_mode='lockstep' replays joint steps of every agent, so it needs "
                         "env_params done_when='any' (the joint episode ends at the first agent's end); "
                         "with done_when='all' (RLlib's make_multi_agent) use replay_mode='independent'")
    per_store = max(config.rollout_fragment_length * num_envs * (1 if lockstep else len(a)) for a in groups.values())
    if per_store > buffer_size:
        raise ValueError(f"buffer_size={config.buffer_size} holds fewer items per device than one store step adds "
                         f"({per_store}); raise buffer_size")
    stores = {LOCKSTEP: make_buffer(config.prioritized_replay, hyper, buffer_size)} if lockstep else \
        {pid: make_buffer(config.prioritized_replay, hyper, buffer_size) for pid in groups}
    policies = {}
    for pid, overrides in multi.policies:
        agent = groups[pid][0]
        obs = envs.obs_struct(spec, agent)
        own = hyper._replace(**{k: v for k, v in overrides if k in Hyperparams._fields})
        buffer = lockstep_view(stores[LOCKSTEP], groups[pid]) if lockstep else stores[pid]
        policies[pid] = policy.make_policy(config.for_policy(overrides), own, obs, spec.num_actions[agent], buffer,
                                           LOCKSTEP if lockstep else pid, axis_name=axis_name)
    n, length = config.n_step, config.rollout_fragment_length

    def behaviour(params: dict[str, Any], eps: Array) -> rollout.Act:
        def act(obs: dict[str, Array], key: Array, memory: Any = None) -> dict[str, Array]:
            keys = jax.random.split(key, len(spec.agents))
            return {a: policy.act(policies[mapping[a]], params[mapping[a]], obs[a], eps, k, noise=config.explore)
                    for a, k in zip(spec.agents, keys)}
        return act

    def items(window: rollout.RawStep) -> dict[str, tuple[Any, Array | None]]:
        steps = {a: rollout.agent_steps(window, a) for a in spec.agents}
        transitions = {a: rollout.n_step_transitions(steps[a], count=length, gamma=policies[mapping[a]].hyper.gamma,
                                                     n=n) for a in spec.agents}
        if lockstep:
            return {LOCKSTEP: (transitions, None)}
        concat = lambda *x: jnp.concatenate(x)  # noqa: E731
        # with done_when="all", the steps of agents that had finished are not stored
        return {pid: (jax.tree_util.tree_map(concat, *[transitions[a] for a in agents]),
                      None if every_step_acts else concat(*[rollout.stored_mask(steps[a], length) for a in agents]))
                for pid, agents in groups.items()}

    def policy_episodes(episodes: rollout.Episodes) -> dict[str, rollout.Episodes]:
        """One entry per agent episode of each policy: ``[T, E, k]`` in time-major order."""
        stack = lambda x: jnp.stack(x, axis=-1)  # noqa: E731
        return {pid: rollout.Episodes(done=stack([episodes.done] * len(agents)),
                                      episode_return=stack([episodes.episode_return[a] for a in agents]),
                                      episode_length=stack([episodes.episode_length] * len(agents)))
                for pid, agents in groups.items()}

    one = {pid: evaluation_act(p, explore=config.evaluation_config.explore) for pid, p in policies.items()}

    def evaluation_actions(params: dict[str, Any], obs: dict[str, Array], eps: Array, key: Array, memory: Any):
        keys = jax.random.split(key, len(spec.agents))
        return {a: one[mapping[a]](params[mapping[a]], obs[a], eps, k, memory)[0]
                for a, k in zip(spec.agents, keys)}, memory

    if spec.env is None:  # the host steps the envs (and plays the evaluation)
        env, evaluate = None, host_evaluation(config.env)
        obs_structs = {a: envs.obs_struct(spec, a) for a in spec.agents}
        init = lambda key: rollout.blank(obs_structs, num_envs, n - 1, acted=True)  # noqa: E731
    else:
        env = envs.functions(spec)
        evaluate = evaluation.make_evaluate(env, evaluation_actions, config.evaluation_num_episodes,
                                            evaluation.default_max_steps(spec.params))
        init = lambda key: rollout.init(env, key, num_envs, n - 1, acted=True)  # noqa: E731
    return Worker(spec=spec, env=env, policies=policies, trained=multi.trained, buffers=stores, policy_mapping=mapping,
                  agents_per_policy={pid: len(agents) for pid, agents in groups.items()}, pending=n - 1, primed=True,
                  init=init, behaviour=behaviour,
                  view=reward_view(config.clip_rewards, config.no_done_at_end, config.bootstrap_truncations), items=items,
                  policy_episodes=policy_episodes, evaluate=evaluate, evaluation_actions=evaluation_actions)
