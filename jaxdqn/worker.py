"""RLlib's rollout worker as the plan sees it: the env, the policies acting in it (one
``policy.Policy`` bundle each), their replay buffers, and how a fragment's steps become the
items each buffer stores. Built once per config, static.

``single_agent`` builds the worker of a gymnax env or a batch of ALE games with one policy,
``default_policy``; its item kind is decided here: n-step ``Transition``s, stacked frames stored
once for an ALE batch (``buffers.frames``), or with ``model.use_lstm`` RLlib's R2D2-style
sequences (the actor carries the recurrent state, the loss is the sequence loss).
``jaxdqn.multiagent.make_worker`` builds the worker of a multi-agent env from the same pieces.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxdqn import atari, buffers, envs, evaluation, policy, rollout
from jaxdqn.config import DEFAULT_POLICY, DQNConfig, Hyperparams
from jaxdqn.types import ReplayBuffer

Array = jax.Array
# window [P + F, E] -> buffer id -> (items with leading [K], mask [K] or None: which to store)
Items = Callable[[rollout.RawStep], dict[str, tuple[Any, Array | None]]]


class Worker(NamedTuple):
    """The static description of how one config's environment is played and stored."""

    spec: Any  # envs.EnvSpec, or multiagent.MultiAgentSpec
    env: Any  # types.Env: the training envs
    policies: dict[str, policy.Policy]  # every policy, by id
    trained: tuple[str, ...]  # the policies that learn (RLlib's policies_to_train)
    buffers: dict[str, ReplayBuffer]  # buffer id -> the buffer a store writes
    policy_mapping: dict[str, str] | None  # agent id -> policy id (None: one agent)
    agents_per_policy: dict[str, int]  # policy id -> its agents, for policy_reward_* ({} for one agent)
    pending: int  # steps carried between fragments (n - 1; sequences: the burn-in)
    primed: bool  # whether the pending steps are taken before the first fragment (n-step look-ahead)
    init: Callable[[Array], rollout.ActorState]  # key -> fresh episodes
    behaviour: Callable[[dict[str, Any], Array], rollout.Act]  # (params by policy, epsilon) -> Act
    view: rollout.View | None  # what the learner sees of a step (clipped rewards, ...)
    items: Items
    policy_episodes: Callable[[rollout.Episodes], dict[str, rollout.Episodes]]  # {} for one agent
    evaluate: Callable[..., evaluation.Evaluation]  # (params by policy, key, eps=0.0)
    # how an evaluation acts: (params by policy, obs, eps, key, memory) -> (actions, memory)
    evaluation_actions: evaluation.EvalAct

    def act(self, params: dict[str, Any], obs: Array, policy_id: str, memory: Any = None, noise_key: Any = None
            ) -> Any:
        """Greedy actions ``[B]`` of policy ``policy_id`` for observations ``[B, *obs]`` (and a
        recurrent policy's next state, from ``memory``: a ``rollout.Memory``); with
        ``noise_key``, greedy on Q-values of noisy layers with noise drawn from it (RLlib's
        exploring forward pass of a noisy network)."""
        bundle = self.policies[policy_id]
        if noise_key is None:
            return policy.greedy(bundle, params[policy_id], obs, memory)
        return policy.act(bundle, params[policy_id], obs, jnp.float32(0.0), noise_key, memory)


def make_buffer(prioritized: bool, hyper: Hyperparams, capacity: int) -> ReplayBuffer:
    """The uniform or (``prioritized``) prioritized buffer of ``capacity`` items, with the
    priority exponents of ``hyper``."""
    if prioritized:
        return buffers.prioritized(capacity, alpha=hyper.prioritized_replay_alpha, eps=hyper.prioritized_replay_eps)
    return buffers.uniform(capacity)


def evaluation_act(bundle: policy.Policy, *, explore: bool) -> evaluation.EvalAct:
    """How an evaluation acts with one policy: greedy, or (``explore``) as the behaviour policy
    at ``eps``; a recurrent policy carries its state (one episode per env: never reset)."""
    recurrent = bundle.network.use_lstm

    def act(params: Any, obs: Array, eps: Array, key: Array, memory: Any) -> tuple[Array, Any]:
        recurrent_memory = rollout.Memory(memory, jnp.zeros((obs.shape[0],), bool)) if recurrent else None
        if explore:
            out = policy.act(bundle, params, obs, eps, key, recurrent_memory)
        else:
            out = policy.greedy(bundle, params, obs, recurrent_memory)
        return out if recurrent else (out, memory)

    return act


def stores_frames_once(spec: envs.EnvSpec) -> bool:
    """Whether a single-agent env's observations are stacks of frames that the replay stores
    once each (``buffers.frames``): an ALE batch's ``[H, W, S]`` uint8 stacks."""
    return envs.is_batched(spec) and len(spec.obs_shape) == 3


def sequence_capacity(config: DQNConfig, num_envs: int, buffer_size: int) -> int:
    """Sequences a replica's buffer holds: ``buffer_size`` timesteps, each sequence bringing
    ``sequence_length - burn_in`` new ones; refused when one store adds more."""
    capacity = max(1, buffer_size // (config.sequence_length - config.burn_in))
    per_store = -(-config.rollout_fragment_length // (config.sequence_length - config.burn_in)) * num_envs
    if per_store > capacity:
        raise ValueError(f"buffer_size={config.buffer_size} holds {capacity} sequences of {config.sequence_length} "
                         f"steps per device, fewer than the {per_store} that one store step adds; raise buffer_size")
    return capacity


def single_agent(config: DQNConfig, hyper: Hyperparams, *, num_envs: int, buffer_size: int,
                 axis_name: str | None = None, spec: envs.EnvSpec | None = None) -> Worker:
    """The worker of a gymnax env (or a batch of ALE games) with ``num_envs`` envs and a replay
    buffer of ``buffer_size`` timesteps (per replica); refusals name the key. ``spec``: the env's
    spec where the shell made it; one whose ``env`` is None steps on the host (``envs.host_spec``:
    its fragments come to the plan's ``take``; no env functions, no evaluation here)."""
    spec = envs.make_env(config.env, config.env_params, num_envs=num_envs) if spec is None else spec
    host = spec.env is None
    recurrent, length, n = config.model.use_lstm, config.rollout_fragment_length, config.n_step
    frames = stores_frames_once(spec)
    if recurrent:
        buffer = make_buffer(config.prioritized_replay, hyper, sequence_capacity(config, num_envs, buffer_size))

        def items(window: rollout.RawStep) -> dict[str, tuple[Any, Array | None]]:
            return {DEFAULT_POLICY: (rollout.sequence_items(
                window, seq_len=config.sequence_length, burn_in=config.burn_in, gamma=hyper.gamma,
                zero_init_states=config.zero_init_states), None)}
    else:
        buffer = make_buffer(config.prioritized_replay, hyper, buffer_size)
        if frames:
            buffer = buffers.frame_replay(buffer, capacity=buffer_size, num_envs=num_envs, fragment_length=length,
                                          n_step=n, stack=spec.obs_shape[-1])
        assemble = rollout.frame_items if frames else rollout.n_step_transitions

        def items(window: rollout.RawStep) -> dict[str, tuple[Any, Array | None]]:
            return {DEFAULT_POLICY: (assemble(window, count=length, gamma=hyper.gamma, n=n),
                                     rollout.stored_mask(window, length))}

    obs = jax.ShapeDtypeStruct(spec.obs_shape, spec.obs_dtype or jnp.float32)
    bundle = policy.make_policy(config, hyper, obs, spec.num_actions, buffer, DEFAULT_POLICY, axis_name=axis_name)

    def behaviour(params: dict[str, Any], eps: Array) -> rollout.Act:
        return lambda obs, key, memory=None: policy.act(bundle, params[DEFAULT_POLICY], obs, eps, key, memory,
                                                        noise=config.explore)

    pending = config.burn_in if recurrent else n - 1
    initial = bundle.network.initial_state(num_envs) if recurrent else None
    one = evaluation_act(bundle, explore=config.evaluation_config.explore)
    evaluation_actions = lambda params, *args: one(params[DEFAULT_POLICY], *args)  # noqa: E731
    if host:
        env, evaluate = None, host_evaluation(config.env)
        init = lambda key: rollout.blank(obs, num_envs, pending, recurrent_state=initial)  # noqa: E731
    else:
        env = envs.functions(spec)
        # A batch of ALE games is one stateful object: evaluation plays its own.
        eval_spec = (envs.make_env(config.env, config.env_params, num_envs=config.evaluation_num_episodes,
                                   runs=spec.env.runs) if envs.is_batched(spec) else spec)
        evaluate = evaluation.make_evaluate(
            envs.functions(eval_spec), evaluation_actions,
            config.evaluation_num_episodes, evaluation.default_max_steps(spec.params),
            bundle.network.initial_state(config.evaluation_num_episodes) if recurrent else ())
        init = lambda key: rollout.init(env, key, num_envs, pending, recurrent_state=initial,  # noqa: E731
                                        acted=envs.is_batched(spec))
    return Worker(spec=spec, env=env, policies={DEFAULT_POLICY: bundle}, trained=(DEFAULT_POLICY,),
                  buffers={DEFAULT_POLICY: buffer}, policy_mapping=None, agents_per_policy={}, pending=pending,
                  primed=not recurrent, init=init,
                  behaviour=behaviour, items=items, policy_episodes=lambda episodes: {}, evaluate=evaluate,
                  evaluation_actions=evaluation_actions,
                  view=reward_view(config.clip_rewards, config.no_done_at_end, config.bootstrap_truncations,
                                    clip_atari=atari.is_atari(config.env) or is_host_atari(spec)))


def host_evaluation(env: str) -> Callable[..., evaluation.Evaluation]:
    """``evaluate`` of an env that steps on the host: not the plan's (its evaluation envs step
    outside the compiled program too; the shell's ``jaxdqn.hostrun.make_evaluate`` plays them)."""
    def evaluate(*args: Any, **kwargs: Any) -> evaluation.Evaluation:
        raise ValueError(f"env={env!r} steps on the host: the compiled plan cannot evaluate it; "
                         "jaxdqn.hostrun.make_evaluate (the Trainer's evaluate) does")
    return evaluate


def is_host_atari(spec: envs.EnvSpec) -> bool:
    """An Atari game stepped on the host (EnvPool's), whose rewards the learner clips as RLlib's
    DeepMind preprocessing does."""
    return spec.env is None and getattr(spec.params, "atari", False)


def reward_view(clip_rewards: Any, no_done_at_end: bool, bootstrap_truncations: bool, *,
                clip_atari: bool = False) -> rollout.View | None:
    """RLlib's ``clip_rewards`` (None: sign clipping for Atari, its DeepMind preprocessing, none
    else), ``no_done_at_end`` and ``bootstrap_truncations``, as the view the learner gets of
    each step."""
    clip = True if clip_rewards is None and clip_atari else clip_rewards
    return rollout.make_view(clip_rewards=clip, no_done_at_end=no_done_at_end,
                             bootstrap_truncations=bootstrap_truncations)
