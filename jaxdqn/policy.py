"""One policy as a bundle (RLlib's ``Policy``): its config, Q-network, optimizer, SGD step and
the replay buffer it trains from, with the functions that act with it and replay and train it.

``replay`` is RLlib's ``replay_op`` for one policy: sample a batch from its buffer, RLlib's
``before_learn_on_batch`` hook, one SGD step, the new priorities written back, the target
synced when due. A single-agent run has one policy, ``default_policy``; a multi-agent run maps
the same functions over its policies (``jaxdqn.multiagent``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxdqn import exploration, learner
from jaxdqn.config import DQNConfig, Hyperparams
from jaxdqn.networks import QNetwork
from jaxdqn.types import ReplayBuffer, Sample

Array = jax.Array
# RLlib's ``before_learn_on_batch(batch, ...)``: a pure ``(sample, key) -> sample`` applied to
# every replayed batch before the SGD step (e.g. reward shaping, relabelling, augmentation).
BatchHook = Callable[[Sample, Array], Sample]


class Policy(NamedTuple):
    """One policy's static bundle; its state is a ``learner.LearnerState``."""

    config: DQNConfig  # the run's config with this policy's overrides
    hyper: Hyperparams  # its numbers (traced in a sweep)
    network: QNetwork
    optimizer: optax.GradientTransformation
    learn: learner.Learn  # its SGD step and the statistics of a step's record
    buffer: ReplayBuffer  # what it samples and writes priorities to
    buffer_id: str  # the train state's buffer that ``buffer`` reads (policies may share one)
    obs: jax.ShapeDtypeStruct  # one observation


def make_policy(config: DQNConfig, hyper: Hyperparams, obs: jax.ShapeDtypeStruct, num_actions: int,
                buffer: ReplayBuffer, buffer_id: str, *, axis_name: str | None = None) -> Policy:
    """The bundle of a policy of ``config`` acting on observations like ``obs`` with
    ``num_actions`` actions; with ``axis_name`` its SGD step averages over the device axis."""
    network = QNetwork(num_actions, config.model, config.head)
    optimizer = learner.make_optimizer(config.optimizer, lr=hyper.lr, adam_epsilon=hyper.adam_epsilon,
                                       grad_clip=hyper.grad_clip, grad_clip_mode=config.grad_clip_mode)
    learn = learner.make_learn(config.loss, network, optimizer, lr=hyper.lr, lr_schedule=config.lr_schedule,
                               gamma=hyper.gamma, axis_name=axis_name)
    return Policy(config=config, hyper=hyper, network=network, optimizer=optimizer, learn=learn,
                  buffer=buffer, buffer_id=buffer_id, obs=obs)


def init(policy: Policy, key: Array) -> learner.LearnerState:
    """Fresh params, target and optimizer state."""
    lead = (1, 1) if policy.network.use_lstm else (1,)
    return learner.init(policy.network, policy.optimizer, key, jnp.zeros(lead + policy.obs.shape, policy.obs.dtype))


def q_values(policy: Policy, params: Any, obs: Array, key: Array | None, memory: Any = None) -> tuple[Array, Any]:
    """``(Q [B, A], next recurrent state or None)`` for observations ``[B, *obs]``: with fresh
    noise from ``key``, or at the noisy layers' mean weights when ``key`` is None; a recurrent
    network steps once from ``memory`` (``rollout.Memory``)."""
    kwargs = {"deterministic": True} if key is None else {"rngs": {"noise": key}}
    if memory is None:
        return policy.network.apply(params, obs, **kwargs).q, None
    out, state = policy.network.apply(params, obs[:, None], memory.state, memory.first[:, None], **kwargs)
    return out.q[:, 0], state


def act(policy: Policy, params: Any, obs: Array, eps: Array, key: Array, memory: Any = None, *,
        noise: bool = True) -> Any:
    """Behaviour actions ``[B]``: epsilon-greedy at ``eps`` on Q-values, with fresh noise (noisy
    layers) unless ``noise`` is False (``explore=False``); a recurrent policy also returns its
    next state."""
    noise_key, act_key = jax.random.split(key) if noise and policy.network.head.noisy else (None, key)
    q, state = q_values(policy, params, obs, noise_key, memory)
    actions = exploration.epsilon_greedy(act_key, q, eps)
    return actions if memory is None else (actions, state)


def greedy(policy: Policy, params: Any, obs: Array, memory: Any = None) -> Any:
    """``argmax_a Q`` ``[B]``, noise-free (and the next state of a recurrent policy)."""
    q, state = q_values(policy, params, obs, None, memory)
    return exploration.greedy(q) if memory is None else (exploration.greedy(q), state)


def blank_record(policy: Policy, params: Any, buffer: Any, key: Array, batch_size: int) -> learner.StepRecord:
    """A zero ``StepRecord`` shaped as ``replay``'s from ``buffer`` (only the buffer's draw is
    traced, for the batch it gives: a lockstep policy trains on every agent it maps)."""
    weights = jax.eval_shape(lambda b, k: policy.buffer.sample(b, k, batch_size, 1.0).weights, buffer, key)
    lengths = (policy.config.sequence_length,) if policy.config.model.use_lstm else ()
    zero = jnp.zeros((), jnp.float32)
    return learner.StepRecord(loss=zero, q_selected=jnp.zeros(weights.shape + lengths, jnp.float32),
                              mean_td_error=zero, grads=jax.tree_util.tree_map(jnp.zeros_like, params), cur_lr=zero)


def replay(policy: Policy, state: learner.LearnerState, buffer: Any, *, sample_key: Array, train_key: Array,
           batch_size: int, beta: Array, env_steps: Array, hook: BatchHook | None = None
           ) -> tuple[learner.LearnerState, Any, learner.StepRecord, Array]:
    """One replay step: ``(learner state, buffer state, the SGD step's record, synced)``.
    Policies sharing a buffer with the same ``sample_key`` train on the same sampled steps
    (lockstep replay)."""
    sample = policy.buffer.sample(buffer, sample_key, batch_size, beta)
    hook_key, step_key = jax.random.split(train_key)
    if hook is not None:
        sample = hook(sample, hook_key)
    state, td_error, record = policy.learn.step(state, sample, env_steps=env_steps, key=step_key)
    buffer = policy.buffer.update(buffer, sample.indices, td_error)
    state, synced = learner.sync_target(state, env_steps, target_network_update_freq=policy.hyper.target_network_update_freq,
                                        tau=policy.hyper.tau)
    return state, buffer, record, synced
