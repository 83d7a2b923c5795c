"""How a plan plays its environment and what it stores: one ``Acting`` per kind of environment.

The execution plan (``plan.make_plan``) is one program for every variant: learners, replay
buffers and learner statistics are dicts keyed by policy id, as in RLlib, where a single-agent
run is a multi-agent one with the policy ``default_policy`` (a dict of one costs nothing under
``jit``). What differs between variants is decided once, statically, in an ``Acting``:

- which policies exist, their configs (a policy's overrides applied) and networks;
- the replay buffers (id -> capacity) and which buffer each policy replays, and how a policy's
  training batch is taken from its buffer's sample (``batch``);
- the actor: ``init`` (fresh episodes), ``prime`` (the n-step look-ahead), ``fragment`` (one
  rollout fragment: the items for each buffer with their store masks, the joint episodes that
  ended and, for multi-agent envs, each policy's agent episodes), ``act`` and ``evaluate``.

``single_agent`` builds it for a gymnax env or a batch of ALE games; its item kind is chosen
here once: n-step ``Transition``s, or with ``model.use_lstm`` RLlib's R2D2-style sequences
(``SequenceItem``: the actor carries the recurrent state and the loss is the sequence loss). An
ALE batch's stacked frames are stored once each (``buffers.frames``: ``storage`` wraps the
buffer, which samples whole transitions all the same; ``rollout.frame_items`` makes its items).
``multiagent.make_acting`` builds it for a multi-agent env.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from jaxdqn import atari, envs, evaluation, exploration, rollout
from jaxdqn.buffers.frames import make_frame_replay
from jaxdqn.config import DQNConfig
from jaxdqn.networks import QNetwork, make_network
from jaxdqn.types import ReplayBuffer, Sample

Array = jax.Array
DEFAULT_POLICY = "default_policy"  # RLlib's DEFAULT_POLICY_ID: the policy of a single-agent run

# (params: policy id -> params, eps [], actor, key) -> (actor, stored, episodes, policy episodes):
# ``stored`` maps a buffer id to (items with leading [K], mask [K] or None: which to store).
Fragment = Callable[[dict[str, Any], Array, Any, Array],
                    tuple[Any, dict[str, tuple[Any, Array | None]], rollout.Episodes, dict[str, rollout.Episodes]]]


def plain_storage(buffer: ReplayBuffer, capacity: int) -> ReplayBuffer:
    """Items stored as they come (every kind but stacked frames)."""
    return buffer


def stores_frames_once(spec: Any) -> bool:
    """Whether a single-agent env's observations are stacks of frames that the replay stores
    once each (``buffers.frames``): an ALE batch's ``[H, W, S]`` uint8 stacks."""
    return envs.is_batched(spec) and len(spec.obs_shape) == 3


class Acting(NamedTuple):
    """The static description of how one config's environment is played (see the module doc)."""

    spec: Any  # envs.EnvSpec, or multi_agent_envs.MultiAgentSpec
    configs: dict[str, DQNConfig]  # policy id -> its config (the run's, with the policy's overrides)
    networks: dict[str, QNetwork]
    obs_shapes: dict[str, tuple[int, ...]]  # policy id -> one observation's shape
    num_actions: dict[str, int]
    capacities: dict[str, int]  # replay buffer id -> items per replica
    buffer_of: dict[str, str]  # policy id -> the buffer it replays
    priorities_from: dict[str, str]  # buffer id -> the policy whose TD errors are its priorities (its own buffer)
    ring_agents: dict[str, int]  # policy id -> agents of the policy, one policy_reward_* ring entry each; {}: none
    policy_mapping: dict[str, str] | None  # agent id -> policy id (multi-agent envs; None for one agent)
    primed_steps: int  # env steps per env that ``prime`` takes (counted as sampled)
    init: Callable[[Array], Any]  # key -> a fresh actor
    # (params, eps, actor, key) -> (actor, episodes, policy episodes): the first ``primed_steps``
    # steps into the n-step look-ahead (no items); None when ``primed_steps`` is 0
    prime: Callable[..., tuple[Any, rollout.Episodes, dict[str, rollout.Episodes]]] | None
    fragment: Fragment
    network_input: Callable[[Any], dict[str, Array]]  # actor -> an example network input per policy
    batch: Callable[[str, Sample], Sample]  # (policy id, its buffer's sample) -> the policy's training batch
    evaluate: Callable[..., evaluation.Evaluation]  # (params, key, eps=0.0): greedy (or explore) episodes
    act: Callable[..., Any]  # (params, obs [B, *obs], policy_id, memory=None) -> greedy actions [B]
    # (a uniform or prioritized buffer, its capacity) -> the buffer that stores this kind of item
    storage: Callable[[ReplayBuffer, int], ReplayBuffer] = plain_storage


def own_batch(policy_id: str, sample: Sample) -> Sample:
    """A policy that has its buffer to itself trains on the whole sample."""
    return sample


def single_agent(config: DQNConfig, *, num_envs: int, buffer_size: int) -> Acting:
    """The ``Acting`` of a gymnax env (or a batch of ALE games) with ``num_envs`` envs and a
    replay buffer of ``buffer_size`` timesteps (per replica); refusals name the key."""
    recurrent = config.model.use_lstm
    seq_len, burn_in = config.sequence_length, config.burn_in
    n, length = config.n_step, config.rollout_fragment_length
    capacity = buffer_size
    if recurrent:  # buffer_size counts timesteps; an item is a sequence
        capacity = max(1, buffer_size // (seq_len - burn_in))
        per_store_items = -(-length // (seq_len - burn_in)) * num_envs
        if per_store_items > capacity:
            raise ValueError(f"buffer_size={config.buffer_size} holds {capacity} sequences of {seq_len} steps per "
                             f"device, fewer than the {per_store_items} that one store step adds; raise buffer_size")
    spec = envs.make_env(config.env, config.env_params, num_envs=num_envs)
    network = make_network(config.model, config.head, spec.num_actions)
    # RLlib's clip_rewards=None: sign clipping for Atari (its DeepMind preprocessing), none else.
    clip_rewards = True if config.clip_rewards is None and atari.is_atari(config.env) else config.clip_rewards
    view = rollout.make_view(clip_rewards=clip_rewards, no_done_at_end=config.no_done_at_end)
    still = not config.explore  # explore=False: no noise either

    def policy(params_and_eps, obs, key, memory=None):
        params, eps = params_and_eps
        noise_key, act_key = jax.random.split(key)
        if memory is None:
            q = network.apply(params, obs, deterministic=still, rngs={"noise": noise_key}).q
            return exploration.epsilon_greedy(act_key, q, eps)
        out, state = network.apply(params, obs[:, None], memory.state, memory.first[:, None],
                                   deterministic=still, rngs={"noise": noise_key})
        return exploration.epsilon_greedy(act_key, out.q[:, 0], eps), state

    if recurrent:  # the pending steps are the next slice's burn-in; n-step sums are the loss's
        def init(key: Array) -> rollout.ActorState:
            return rollout.init(spec, key, num_envs, burn_in + 1, recurrent_state=network.initial_state(num_envs))

        def fragment(params, eps, actor, key):
            actor, items, episodes = rollout.sequence_fragment(
                spec, policy, (params[DEFAULT_POLICY], eps), actor, key, length=length, seq_len=seq_len,
                burn_in=burn_in, gamma=config.gamma, zero_init_states=config.zero_init_states, view=view)
            return actor, {DEFAULT_POLICY: (items, None)}, episodes, {}

        prime = None  # sequences need no look-ahead: the pending steps are the next slice's burn-in
        storage = plain_storage

        def network_input(actor):
            return {DEFAULT_POLICY: actor.obs[:, None]}

        def act(params, obs, policy_id=DEFAULT_POLICY, memory=None):
            return evaluation.greedy_recurrent_actions(network, params[policy_id], obs, memory.state, memory.first)
    else:
        frames = stores_frames_once(spec)
        assemble = rollout.frame_items if frames else rollout.n_step_transitions

        def init(key: Array) -> rollout.ActorState:
            return rollout.init(spec, key, num_envs, n)

        def fragment(params, eps, actor, key):
            actor, items, episodes, mask = rollout.fragment(spec, policy, (params[DEFAULT_POLICY], eps), actor, key,
                                                            length=length, gamma=config.gamma, n=n, view=view,
                                                            assemble=assemble)
            return actor, {DEFAULT_POLICY: (items, mask)}, episodes, {}

        def storage(buffer: ReplayBuffer, capacity: int) -> ReplayBuffer:
            if not frames:
                return buffer
            return make_frame_replay(buffer, capacity=capacity, num_envs=num_envs, fragment_length=length, n_step=n,
                                     stack=spec.obs_shape[-1])

        def prime(params, eps, actor, key):
            actor, episodes = rollout.prime(spec, policy, (params[DEFAULT_POLICY], eps), actor, key, view)
            return actor, episodes, {}

        def network_input(actor):
            return {DEFAULT_POLICY: actor.obs}

        def act(params, obs, policy_id=DEFAULT_POLICY, memory=None):
            return evaluation.greedy_actions(network, params[policy_id], obs)

    # A batch of ALE games is one stateful object: evaluation plays its own.
    eval_spec = (envs.make_env(config.env, config.env_params, num_envs=config.evaluation_num_episodes)
                 if envs.is_batched(spec) else spec)
    evaluate_one = evaluation.make_evaluate(eval_spec, network, config.evaluation_num_episodes,
                                            explore=config.evaluation_config.explore)

    def evaluate(params: dict[str, Any], key: Array, eps: Array | float = 0.0) -> evaluation.Evaluation:
        return evaluate_one(params[DEFAULT_POLICY], key, eps)

    return Acting(spec=spec, configs={DEFAULT_POLICY: config}, networks={DEFAULT_POLICY: network},
                  obs_shapes={DEFAULT_POLICY: tuple(spec.obs_shape)}, num_actions={DEFAULT_POLICY: spec.num_actions},
                  capacities={DEFAULT_POLICY: capacity}, buffer_of={DEFAULT_POLICY: DEFAULT_POLICY},
                  priorities_from={DEFAULT_POLICY: DEFAULT_POLICY}, ring_agents={},
                  policy_mapping=None, primed_steps=0 if recurrent else n - 1, init=init, prime=prime,
                  fragment=fragment, network_input=network_input, batch=own_batch, evaluate=evaluate, act=act,
                  storage=storage)
