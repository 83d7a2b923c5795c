"""Multi-agent DQN: RLlib's multi-agent execution plan (independent or lockstep replay) in one scan.

``make_plan(config)`` is ``plan.make_plan`` for a multi-agent environment
(``multi_agent_envs``): the same ``Plan`` of pure pieces, so the ``Runner`` (``vmap`` over
seeds, ``pmap`` over devices), the ``Trainer``, checkpoints and the command work unchanged.

- ``config.multiagent.policies`` are independent learners: one ``LearnerState`` per policy, the
  train state's ``learner`` is a dict policy id -> ``LearnerState`` (each policy may override
  ``config.POLICY_KEYS`` such as ``lr`` or ``model``). ``policy_mapping_fn`` maps every agent to
  a policy once, statically; agents of one policy share its network and its replay.
- Store: each env step, every agent acts with its policy (epsilon-greedy on the shared schedule);
  each agent's steps become n-step transitions exactly as for one agent (``rollout``). With the
  env's ``done_when="all"`` (RLlib's), the steps of an agent that has finished its episode while
  others play on are not stored (a masked ``add``).
- ``replay_mode="independent"``: one buffer per policy (a dict pytree, all in the same scan) that
  receives the transitions of its agents; each replay step, every policy in
  ``policies_to_train`` samples its own ``train_batch_size`` batch, takes an SGD step and writes
  its priorities back.
- ``replay_mode="lockstep"``: one uniform buffer of joint steps (a dict agent -> transition per
  item); a replay step samples ``train_batch_size`` joint steps and each policy trains on its
  agents' transitions at those steps (RLlib refuses prioritized replay here, and so do we).
- Target networks sync per policy on the sampled env-step rule; the counters count env steps.
- Reports: RLlib's joint ``episode_reward_mean`` (sum over agents), ``policy_reward_mean/<pid>``
  (``/min``, ``/max``: one entry per agent episode, as RLlib's ``policy_reward_*``) and
  per-policy learner stats ``learner/<pid>/<stat>``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import buffers, evaluation, exploration, learner, multi_agent_envs, plan, rollout
from jaxdqn.config import DQNConfig, ModelConfig, MultiAgentConfig
from jaxdqn.networks import make_network
from jaxdqn.types import Sample

Array = jax.Array


class MultiAgentActor(NamedTuple):
    env_state: Any
    obs: dict[str, Array]  # agent -> [E, *obs], to act on next
    episode_return: Array  # [E] float32, joint (sum over agents) of the running episodes
    agent_return: dict[str, Array]  # agent -> [E] float32
    episode_length: Array  # [E] int32
    pending: dict[str, rollout.RawStep]  # agent -> leaves [n - 1, E, ...] (see rollout)


class Ring(NamedTuple):
    """The last completed episode returns of one policy's agents (``plan.record_episodes`` fills it)."""

    returns: Array  # [ring] float32
    lengths: Array  # [ring] int32
    ring_pos: Array  # [] int32
    episodes_total: Array  # [] int32, agent episodes


class MultiAgentMetrics(NamedTuple):
    """``plan.Metrics`` (joint episodes, counters) plus a ring per policy; ``learner`` is a dict
    policy id -> ``LearnInfo`` of its last SGD step."""

    returns: Array
    lengths: Array
    ring_pos: Array
    episodes_total: Array
    num_steps_sampled: Array
    num_steps_trained: Array
    num_target_updates: Array
    last_target_update_ts: Array
    learner: dict[str, learner.LearnInfo]
    episodes_at_report: Array
    sampled_at_report: Array
    trained_at_report: Array
    policies: dict[str, Ring]


def is_multi_agent_config(config: DQNConfig) -> bool:
    """A ``multiagent`` section, or a multi-agent environment (then one shared policy)."""
    return config.multiagent is not None or multi_agent_envs.is_multi_agent(config.env)


def policy_config(config: DQNConfig, overrides: tuple[tuple[str, Any], ...]) -> DQNConfig:
    """The config of one policy: the run's, with its overrides (``model`` merged key by key)."""
    changes = dict(overrides)
    if "model" in changes and not isinstance(changes["model"], ModelConfig):
        changes["model"] = ModelConfig(**{**dataclasses.asdict(config.model), **dict(changes["model"])})
    return dataclasses.replace(config, multiagent=None, **changes)


def make_plan(config: DQNConfig, *, before_learn_on_batch: plan.BatchHook | None = None,
              axis_name: str | None = None, num_replicas: int = 1,
              prng_impl: str | None = plan.PRNG_IMPL) -> plan.Plan:
    """The multi-agent ``Plan`` for ``config`` (see the module docstring); refusals name the key.
    ``init`` draws from ``plan.plan_key(key, prng_impl)``."""
    multi = config.multiagent or MultiAgentConfig()
    if num_replicas > 1 and axis_name is None:
        raise ValueError(f"num_replicas={num_replicas} needs the axis_name of the device axis")
    num_envs, buffer_size, batch_size = plan.split_totals(config, num_replicas)
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
    trainable = tuple(multi.policies_to_train or pids)
    lockstep = multi.replay_mode == "lockstep"
    every_step_acts = spec.done_when == "any"  # "all": finished agents skip steps until the joint end
    if lockstep and not every_step_acts:
        raise ValueError("multiagent.replay_mode='lockstep' replays joint steps of every agent, so it needs "
                         "env_params done_when='any' (the joint episode ends at the first agent's end); "
                         "with done_when='all' (RLlib's make_multi_agent) use replay_mode='independent'")
    configs = {pid: policy_config(config, overrides) for pid, overrides in multi.policies}
    networks = {pid: make_network(configs[pid], spec.num_actions[groups[pid][0]]) for pid in pids}
    optimizers = {pid: learner.make_optimizer(configs[pid]) for pid in pids}
    train_steps = {pid: learner.make_train_step(configs[pid], networks[pid], optimizers[pid], axis_name=axis_name)
                   for pid in pids}
    per_store = {pid: config.rollout_fragment_length * num_envs * (1 if lockstep else len(groups[pid])) for pid in pids}
    if max(per_store.values()) > buffer_size:
        raise ValueError(f"buffer_size={config.buffer_size} holds fewer items per device than one store step adds "
                         f"({max(per_store.values())}); raise buffer_size")

    def make_buffer(capacity: int) -> buffers.ReplayBuffer:
        if config.prioritized_replay:
            return buffers.prioritized(capacity, alpha=config.prioritized_replay_alpha, eps=config.prioritized_replay_eps)
        return buffers.uniform(capacity)

    buf = make_buffer(buffer_size)  # one per policy (independent), or the joint one (lockstep)
    schedule = plan.make_schedule(config)
    n, length = config.n_step, config.rollout_fragment_length
    beta_points = [(0, config.prioritized_replay_beta),
                   (config.prioritized_replay_beta_annealing_timesteps, config.final_prioritized_replay_beta)]
    gather = plan.gatherer(axis_name)

    view = rollout.make_view(clip_rewards=config.clip_rewards, no_done_at_end=config.no_done_at_end)

    def act(params: dict[str, Any], obs: dict[str, Array], eps: Array, key: Array) -> dict[str, Array]:
        """Every agent's behaviour action ``[E]``: its policy's network on its observation."""
        actions = {}
        for agent, k in zip(spec.agents, jax.random.split(key, len(spec.agents))):
            pid = mapping[agent]
            noise_key, act_key = jax.random.split(k)
            q = networks[pid].apply(params[pid], obs[agent], deterministic=not config.explore,
                                    rngs={"noise": noise_key}).q
            actions[agent] = exploration.epsilon_greedy(act_key, q, eps)
        return actions

    def run_steps(state_learner: dict[str, learner.LearnerState], eps: Array, actor: MultiAgentActor,
                  key: Array, num_steps: int):
        params = {pid: ls.params for pid, ls in state_learner.items()}

        def body(actor: MultiAgentActor, key: Array):
            act_key, env_key = jax.random.split(key)
            actions = act(params, actor.obs, eps, act_key)
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

        return lax.scan(body, actor, jax.random.split(key, num_steps))

    def record(metrics: MultiAgentMetrics, episodes: rollout.Episodes, agent_return: dict[str, Array]):
        metrics = plan.record_episodes(metrics, episodes)
        rings = {}
        for pid in pids:  # one entry per agent episode: [T, E, k] in time-major order
            stack = lambda x: jnp.stack(x, axis=-1)  # noqa: E731
            rings[pid] = plan.record_episodes(metrics.policies[pid], rollout.Episodes(
                done=stack([episodes.done] * len(groups[pid])),
                episode_return=stack([agent_return[a] for a in groups[pid]]),
                episode_length=stack([episodes.episode_length] * len(groups[pid]))))
        return metrics._replace(policies=rings)

    def epsilon(state: plan.TrainState) -> Array:
        return exploration.behaviour_epsilon(config.exploration_config, state.metrics.num_steps_sampled,
                                             explore=config.explore)

    def store(state: plan.TrainState, _=None) -> tuple[plan.TrainState, None]:
        key, step_key = jax.random.split(state.key)
        actor, (raw, episodes, agent_return) = run_steps(state.learner, epsilon(state), state.actor, step_key, length)
        transitions, pending, acted = {}, {}, {}
        for a in spec.agents:
            window, pending[a] = rollout.extend_window(actor.pending[a], raw[a])
            transitions[a] = rollout.n_step_transitions(window, count=length, gamma=configs[mapping[a]].gamma, n=n)
            acted[a] = window.acted[:length].reshape(-1)  # [length * E], the transitions' order
        if lockstep:
            buffer = buf.add(state.buffer, transitions)
        else:  # with done_when="all", the steps of agents that had finished are not stored
            concat = lambda *x: jnp.concatenate(x)  # noqa: E731
            buffer = {pid: buf.add(state.buffer[pid],
                                   jax.tree_util.tree_map(concat, *[transitions[a] for a in groups[pid]]),
                                   None if every_step_acts else concat(*[acted[a] for a in groups[pid]]))
                      for pid in pids}
        metrics = record(state.metrics, episodes, agent_return)
        metrics = metrics._replace(num_steps_sampled=metrics.num_steps_sampled + schedule.steps_per_store)
        return state._replace(buffer=buffer, actor=actor._replace(pending=pending), metrics=metrics, key=key), None

    def replay(state: plan.TrainState, stats_due: Array | None = None) -> tuple[plan.TrainState, None]:
        """One replay step of every trainable policy; ``stats_due`` as in ``plan.make_plan``."""
        key, lockstep_key, *policy_keys = jax.random.split(state.key, 2 + len(trainable))
        sampled = state.metrics.num_steps_sampled
        beta = exploration.piecewise_linear(beta_points, sampled)
        learners, infos, buffer = dict(state.learner), dict(state.metrics.learner), state.buffer
        if lockstep:
            joint = buf.sample(buffer, lockstep_key, batch_size, beta)
        else:
            buffer = dict(buffer)
        synced_any = jnp.zeros((), bool)
        for pid, k in zip(trainable, policy_keys):
            sample_key, hook_key, train_key = jax.random.split(k, 3)
            if lockstep:  # this policy's agents at the sampled joint steps: [B * k]
                items = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *[joint.items[a] for a in groups[pid]])
                count = len(groups[pid])
                sample = Sample(items=items, indices=jnp.tile(joint.indices, count), weights=jnp.tile(joint.weights, count))
            else:
                sample = buf.sample(buffer[pid], sample_key, batch_size, beta)
            if before_learn_on_batch is not None:
                sample = before_learn_on_batch(sample, hook_key)
            learners[pid], info = train_steps[pid](learners[pid], sample, env_steps=sampled, key=train_key,
                                                   stats_due=stats_due, last_info=infos[pid])
            if not lockstep:
                buffer[pid] = buf.update(buffer[pid], sample.indices, info.td_error)
            learners[pid], synced = learner.sync_target(
                learners[pid], sampled, target_network_update_freq=configs[pid].target_network_update_freq,
                tau=configs[pid].tau)
            synced_any = synced_any | synced
            infos[pid] = info._replace(td_error=jnp.zeros((0,), jnp.float32))
        m = state.metrics
        metrics = m._replace(
            num_steps_trained=m.num_steps_trained + plan.replayed_steps(config),
            num_target_updates=m.num_target_updates + synced_any.astype(jnp.int32),
            last_target_update_ts=jnp.max(jnp.stack([learners[pid].last_target_update for pid in trainable])),
            learner=infos,
        )
        return state._replace(learner=learners, buffer=buffer, metrics=metrics, key=key), None

    iteration, run_chunk = plan.make_iteration(schedule, store, replay)

    def init(key: Array) -> plan.TrainState:
        """Fresh learners, empty buffers, primed actors, then the warm-up stores."""
        key = plan.plan_key(key, prng_impl if axis_name is None else None)
        learner_key, key = jax.random.split(key)  # the networks: the same on every replica
        if axis_name is not None:
            key = jax.random.fold_in(key, lax.axis_index(axis_name))
        env_key, prime_key, key = jax.random.split(key, 3)
        obs, env_state = multi_agent_envs.reset(spec, env_key, num_envs)
        pending = {a: rollout.init_pending(obs[a], num_envs, n)._replace(acted=jnp.zeros((n - 1, num_envs), bool))
                   for a in spec.agents}
        zeros = jnp.zeros((num_envs,), jnp.float32)
        actor = MultiAgentActor(env_state=env_state, obs=obs, episode_return=zeros,
                                agent_return={a: zeros for a in spec.agents},
                                episode_length=jnp.zeros((num_envs,), jnp.int32), pending=pending)
        learners = {pid: learner.init(networks[pid], optimizers[pid], k, obs[groups[pid][0]])
                    for pid, k in zip(pids, jax.random.split(learner_key, len(pids)))}
        zero = lambda: jnp.zeros((), jnp.int32)  # noqa: E731
        info = learner.empty_info()
        size = plan.ring_size(config, schedule, num_replicas)
        ring = lambda k=1: Ring(returns=jnp.zeros((size * k,), jnp.float32),  # noqa: E731
                                lengths=jnp.zeros((size * k,), jnp.int32), ring_pos=zero(), episodes_total=zero())
        joint_ring = ring()
        metrics = MultiAgentMetrics(**joint_ring._asdict(), num_steps_sampled=zero(), num_steps_trained=zero(),
                                    num_target_updates=zero(), last_target_update_ts=zero(),
                                    learner={pid: info for pid in trainable}, **plan.report_markers(),
                                    policies={pid: ring(len(groups[pid])) for pid in pids})

        def example(agent: str) -> Any:  # one zero transition of an agent
            t = rollout.n_step_transitions(jax.tree_util.tree_map(
                lambda p: jnp.zeros((1,) + p.shape[1:], p.dtype), pending[agent]), count=1,
                gamma=config.gamma, n=1)
            return jax.tree_util.tree_map(lambda x: x[0], t)

        if lockstep:
            buffer = buf.init({a: example(a) for a in spec.agents})
        else:
            buffer = {pid: buf.init(example(groups[pid][0])) for pid in pids}
        state = plan.TrainState(learner=learners, buffer=buffer, actor=actor, metrics=metrics, key=key,
                                replay_credit=zero())
        if n > 1:  # fill the n-step look-ahead
            actor, (raw, episodes, agent_return) = run_steps(learners, epsilon(state), actor, prime_key, n - 1)
            metrics = record(metrics, episodes, agent_return)._replace(num_steps_sampled=jnp.int32((n - 1) * config.num_envs))
            state = state._replace(actor=actor._replace(pending=raw), metrics=metrics)
        return plan.repeat(store, state, schedule.warmup_stores)

    def chunk(state: plan.TrainState) -> tuple[plan.TrainState, dict[str, Array]]:
        """As ``plan.make_plan``'s chunk; ``policy_reward_*`` cover the agent episodes of the same
        smoothing window as the joint episodes."""
        state = run_chunk(state)
        out, window, metrics = plan.close_report(state.metrics, gather, config.metrics_smoothing_episodes)
        for pid in pids:
            episodes = plan.episode_report(metrics.policies[pid], gather, window * len(groups[pid]))
            for stat in ("mean", "min", "max"):
                out[f"policy_reward_{stat}/{pid}"] = episodes[f"episode_reward_{stat}"]
        for pid, info in metrics.learner.items():
            out.update({f"learner/{pid}/{k}": v for k, v in info._asdict().items() if k != "td_error"})
        return state._replace(metrics=metrics), out

    chunks = plan.count_chunks(config, schedule)

    def train(key: Array) -> tuple[plan.TrainState, dict[str, Array]]:
        return lax.scan(lambda s, _: chunk(s), init(key), None, length=chunks)

    evaluate = make_evaluate(spec, networks, mapping, config.evaluation_num_episodes,
                             explore=config.evaluation_config.explore)

    def act_greedy(params: dict[str, Any], obs: Array, policy_id: str) -> Array:
        """Greedy actions ``[B]`` of policy ``policy_id`` for observations ``[B, *obs]``."""
        return evaluation.greedy_actions(networks[policy_id], params[policy_id], obs)

    return plan.Plan(init=init, store=store, replay=replay, iteration=iteration, chunk=chunk, train=train,
                     evaluate=evaluate, act=act_greedy, schedule=schedule, spec=spec, network=networks,
                     num_chunks=chunks, policy_mapping=mapping)


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
