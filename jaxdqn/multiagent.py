"""Multi-agent DQN: how RLlib's multi-agent DQN plays and stores (independent or lockstep replay).

``make_acting(config, ...)`` is the ``acting.Acting`` of a multi-agent environment
(``multi_agent_envs``); ``plan.make_plan`` runs it in the same execution plan as a single agent
(whose one policy is ``default_policy``), so the ``Runner`` (``vmap`` over seeds, ``pmap`` over
devices), the ``Trainer``, checkpoints and the command are the same for both.

- ``config.multiagent.policies`` are independent learners: one ``LearnerState`` per policy in
  the train state's ``learner`` dict (each policy may override ``config.POLICY_KEYS`` such as
  ``lr`` or ``model``). ``policy_mapping_fn`` maps every agent to a policy once, statically;
  agents of one policy share its network and its replay.
- Store: each env step, every agent acts with its policy (epsilon-greedy on the shared schedule);
  each agent's steps become n-step transitions exactly as for one agent (``rollout``). With the
  env's ``done_when="all"`` (RLlib's), the steps of an agent that has finished its episode while
  others play on are not stored (a masked ``add``).
- ``replay_mode="independent"``: one buffer per policy that receives the transitions of its
  agents; each replay step, every policy in ``policies_to_train`` samples its own
  ``train_batch_size`` batch, takes an SGD step and writes its priorities back.
- ``replay_mode="lockstep"``: one uniform buffer (id ``LOCKSTEP``) of joint steps (a dict agent
  -> transition per item); a replay step samples ``train_batch_size`` joint steps and each policy
  trains on its agents' transitions at those steps (RLlib refuses prioritized replay here, and
  so do we).
- Reports: RLlib's joint ``episode_reward_mean`` (sum over agents) and ``policy_reward_mean/<pid>``
  (``/min``, ``/max``: one entry per agent episode, as RLlib's ``policy_reward_*``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import acting, evaluation, exploration, multi_agent_envs, rollout
from jaxdqn.config import DQNConfig, ModelConfig, MultiAgentConfig
from jaxdqn.networks import make_network
from jaxdqn.types import Sample

Array = jax.Array
LOCKSTEP = "lockstep"  # the id of lockstep replay's one joint buffer


class MultiAgentActor(NamedTuple):
    env_state: Any
    obs: dict[str, Array]  # agent -> [E, *obs], to act on next
    episode_return: Array  # [E] float32, joint (sum over agents) of the running episodes
    agent_return: dict[str, Array]  # agent -> [E] float32
    episode_length: Array  # [E] int32
    pending: dict[str, rollout.RawStep]  # agent -> leaves [n - 1, E, ...] (see rollout)


def is_multi_agent_config(config: DQNConfig) -> bool:
    """A ``multiagent`` section, or a multi-agent environment (then one shared policy)."""
    return config.multiagent is not None or multi_agent_envs.is_multi_agent(config.env)


def policy_config(config: DQNConfig, overrides: tuple[tuple[str, Any], ...]) -> DQNConfig:
    """The config of one policy: the run's, with its overrides (``model`` merged key by key)."""
    changes = dict(overrides)
    if "model" in changes and not isinstance(changes["model"], ModelConfig):
        changes["model"] = ModelConfig(**{**dataclasses.asdict(config.model), **dict(changes["model"])})
    return dataclasses.replace(config, multiagent=None, **changes)


def make_acting(config: DQNConfig, *, num_envs: int, buffer_size: int) -> acting.Acting:
    """The ``Acting`` of a multi-agent env with ``num_envs`` envs and buffers of ``buffer_size``
    items (per replica); see the module docstring. Refusals name the key."""
    multi = config.multiagent or MultiAgentConfig()
    spec = multi_agent_envs.make_multi_agent_env(config.env, config.env_params)
    mapping = multi.policy_of(spec.agents)
    pids = multi.policy_ids
    groups = {pid: tuple(a for a in spec.agents if mapping[a] == pid) for pid in pids}
    for pid, agents in groups.items():
        if not agents:
            raise ValueError(f"multiagent.policies: policy {pid!r} has no agent (policy_mapping_fn maps "
                             f"{dict(mapping)}); remove it or map an agent to it")
        shapes = {(spec.obs_shapes[a], spec.num_actions[a]) for a in agents}
        if len(shapes) > 1:
            raise ValueError(f"multiagent.policy_mapping_fn maps agents {list(agents)} with different observation "
                             f"or action spaces to policy {pid!r}; one policy needs one network shape")
    lockstep = multi.replay_mode == "lockstep"
    every_step_acts = spec.done_when == "any"  # "all": finished agents skip steps until the joint end
    if lockstep and not every_step_acts:
        raise ValueError("multiagent.replay_mode='lockstep' replays joint steps of every agent, so it needs "
                         "env_params done_when='any' (the joint episode ends at the first agent's end); "
                         "with done_when='all' (RLlib's make_multi_agent) use replay_mode='independent'")
    configs = {pid: policy_config(config, overrides) for pid, overrides in multi.policies}
    networks = {pid: make_network(configs[pid].model, configs[pid].head, spec.num_actions[groups[pid][0]])
                for pid in pids}
    per_store = {pid: config.rollout_fragment_length * num_envs * (1 if lockstep else len(groups[pid])) for pid in pids}
    if max(per_store.values()) > buffer_size:
        raise ValueError(f"buffer_size={config.buffer_size} holds fewer items per device than one store step adds "
                         f"({max(per_store.values())}); raise buffer_size")
    n, length = config.n_step, config.rollout_fragment_length
    view = rollout.make_view(clip_rewards=config.clip_rewards, no_done_at_end=config.no_done_at_end)

    def behaviour_actions(params: dict[str, Any], obs: dict[str, Array], eps: Array, key: Array) -> dict[str, Array]:
        """Every agent's behaviour action ``[E]``: its policy's network on its observation."""
        actions = {}
        for agent, k in zip(spec.agents, jax.random.split(key, len(spec.agents))):
            pid = mapping[agent]
            noise_key, act_key = jax.random.split(k)
            q = networks[pid].apply(params[pid], obs[agent], deterministic=not config.explore,
                                    rngs={"noise": noise_key}).q
            actions[agent] = exploration.epsilon_greedy(act_key, q, eps)
        return actions

    def run_steps(params: dict[str, Any], eps: Array, actor: MultiAgentActor, key: Array, num_steps: int):
        def body(actor: MultiAgentActor, key: Array):
            act_key, env_key = jax.random.split(key)
            actions = behaviour_actions(params, actor.obs, eps, act_key)
            out, env_state = multi_agent_envs.step(spec, env_key, actor.env_state, actions)
            done = out.done  # the joint episode ended: every agent resets
            agent_return = {a: actor.agent_return[a] + out.reward[a] for a in spec.agents}
            joint = actor.episode_return + sum(out.reward[a] for a in spec.agents)
            length_ = actor.episode_length + 1
            raw = {a: rollout.RawStep(obs=actor.obs[a], action=actions[a].astype(jnp.int32), reward=out.reward[a],
                                      terminated=out.terminated[a], truncated=out.truncated[a],
                                      next_obs=out.next_obs[a], acted=out.acted[a]) for a in spec.agents}
            if view is not None:
                raw = {a: view(r) for a, r in raw.items()}
            episodes = rollout.Episodes(done=done, episode_return=joint, episode_length=length_)
            actor = actor._replace(
                env_state=env_state, obs=out.obs, episode_return=jnp.where(done, 0.0, joint),
                agent_return={a: jnp.where(done, 0.0, r) for a, r in agent_return.items()},
                episode_length=jnp.where(done, 0, length_))
            return actor, (raw, episodes, agent_return)

        actor, (raw, episodes, agent_return) = lax.scan(body, actor, jax.random.split(key, num_steps))
        return actor, raw, episodes, policy_episodes(episodes, agent_return)

    def policy_episodes(episodes: rollout.Episodes, agent_return: dict[str, Array]) -> dict[str, rollout.Episodes]:
        """One entry per agent episode of each policy: ``[T, E, k]`` in time-major order."""
        stack = lambda x: jnp.stack(x, axis=-1)  # noqa: E731
        return {pid: rollout.Episodes(done=stack([episodes.done] * len(groups[pid])),
                                      episode_return=stack([agent_return[a] for a in groups[pid]]),
                                      episode_length=stack([episodes.episode_length] * len(groups[pid])))
                for pid in pids}

    def fragment(params, eps, actor: MultiAgentActor, key: Array):
        actor, raw, episodes, per_policy = run_steps(params, eps, actor, key, length)
        transitions, pending, acted = {}, {}, {}
        for a in spec.agents:
            window, pending[a] = rollout.extend_window(actor.pending[a], raw[a])
            transitions[a] = rollout.n_step_transitions(window, count=length, gamma=configs[mapping[a]].gamma, n=n)
            acted[a] = window.acted[:length].reshape(-1)  # [length * E], the transitions' order
        if lockstep:
            stored = {LOCKSTEP: (transitions, None)}
        else:  # with done_when="all", the steps of agents that had finished are not stored
            concat = lambda *x: jnp.concatenate(x)  # noqa: E731
            stored = {pid: (jax.tree_util.tree_map(concat, *[transitions[a] for a in groups[pid]]),
                            None if every_step_acts else concat(*[acted[a] for a in groups[pid]]))
                      for pid in pids}
        return actor._replace(pending=pending), stored, episodes, per_policy

    def prime(params, eps, actor: MultiAgentActor, key: Array):
        actor, raw, episodes, per_policy = run_steps(params, eps, actor, key, n - 1)
        return actor._replace(pending=raw), episodes, per_policy

    def init(key: Array) -> MultiAgentActor:
        obs, env_state = multi_agent_envs.reset(spec, key, num_envs)
        pending = {a: rollout.init_pending(obs[a], num_envs, n)._replace(acted=jnp.zeros((n - 1, num_envs), bool))
                   for a in spec.agents}
        zeros = jnp.zeros((num_envs,), jnp.float32)
        return MultiAgentActor(env_state=env_state, obs=obs, episode_return=zeros,
                               agent_return={a: zeros for a in spec.agents},
                               episode_length=jnp.zeros((num_envs,), jnp.int32), pending=pending)

    def network_input(actor: MultiAgentActor) -> dict[str, Array]:
        return {pid: actor.obs[groups[pid][0]] for pid in pids}

    def batch(pid: str, sample: Sample) -> Sample:
        if not lockstep:
            return sample
        # this policy's agents at the sampled joint steps: [B * k]
        items = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *[sample.items[a] for a in groups[pid]])
        count = len(groups[pid])
        return Sample(items=items, indices=jnp.tile(sample.indices, count), weights=jnp.tile(sample.weights, count))

    evaluate = make_evaluate(spec, networks, mapping, config.evaluation_num_episodes,
                             explore=config.evaluation_config.explore)

    def act(params: dict[str, Any], obs: Array, policy_id: str, memory: Any = None) -> Array:
        """Greedy actions ``[B]`` of policy ``policy_id`` for observations ``[B, *obs]``."""
        return evaluation.greedy_actions(networks[policy_id], params[policy_id], obs)

    capacities = {LOCKSTEP: buffer_size} if lockstep else {pid: buffer_size for pid in pids}
    return acting.Acting(
        spec=spec, configs=configs, networks=networks,
        obs_shapes={pid: tuple(spec.obs_shapes[groups[pid][0]]) for pid in pids},
        num_actions={pid: spec.num_actions[groups[pid][0]] for pid in pids},
        capacities=capacities, buffer_of={pid: LOCKSTEP if lockstep else pid for pid in pids},
        priorities_from={} if lockstep else {pid: pid for pid in pids},  # the joint buffer is uniform
        ring_agents={pid: len(groups[pid]) for pid in pids}, policy_mapping=mapping, primed_steps=n - 1,
        init=init, prime=prime, fragment=fragment, network_input=network_input, batch=batch,
        evaluate=evaluate, act=act)


def make_evaluate(spec: multi_agent_envs.MultiAgentSpec, networks: dict[str, Any], mapping: dict[str, str],
                  num_episodes: int, *, explore: bool = False) -> Callable[..., evaluation.Evaluation]:
    """``evaluate(params, key, eps=0.0)``: one joint episode per env, greedy (or, with
    ``explore``, epsilon-greedy at ``eps`` with noise); the return sums the agents'."""

    def evaluate(params: dict[str, Any], key: Array, eps: Array | float = 0.0) -> evaluation.Evaluation:
        def step(obs, env_state, memory, key):
            if explore:
                key, *act_keys = jax.random.split(key, 1 + len(spec.agents))
                actions = {a: evaluation.explore_actions(networks[mapping[a]], params[mapping[a]], obs[a], eps, k)
                           for a, k in zip(spec.agents, act_keys)}
            else:
                actions = {a: evaluation.greedy_actions(networks[mapping[a]], params[mapping[a]], obs[a])
                           for a in spec.agents}
            out, env_state = multi_agent_envs.step(spec, key, env_state, actions)
            reward = sum(out.reward[a] for a in spec.agents)
            return out.obs, env_state, memory, reward, out.done

        return evaluation.run_episodes(lambda k: multi_agent_envs.reset(spec, k, num_episodes), step, (),
                                       num_episodes, evaluation.default_max_steps(spec), key)

    return evaluate
