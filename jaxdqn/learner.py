"""The learner: one SGD step of DQN / SimpleQ on a replayed batch, and the target sync.

``make_learn(loss, network, optimizer, lr=..., lr_schedule=..., gamma=..., axis_name=None)``
returns the pure SGD step ``step(state, sample, *, env_steps, key) -> (state, td_error, StepRecord)``
for the TD loss ``loss`` (a ``LossConfig``) and ``statistics(record) -> LearnInfo`` (RLlib's
learner stats, reduced only for the step a report shows); ``make_train_step`` composes the two.
``env_steps`` (sampled so far) drives RLlib's ``lr_schedule``; ``key`` feeds noisy layers. With ``axis_name`` (inside ``pmap``) gradients and
statistics are averaged across devices with ``lax.pmean``. The numbers (``lr``, ``gamma``, the
optimizer's ``adam_epsilon`` and ``grad_clip``) may be traced (a sweep's ``Hyperparams``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from jaxdqn import exploration, losses
from jaxdqn.config import LossConfig, OptimizerConfig
from jaxdqn.networks import QNetwork
from jaxdqn.types import Sample, Transition

Array = jax.Array


class LearnerState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    num_updates: Array  # [] int32, SGD steps taken
    last_target_update: Array  # [] int32, sampled env steps at the last target sync


class LearnInfo(NamedTuple):
    """RLlib's learner stats (``info/learner/default_policy``), plus per-item TD errors."""

    loss: Array
    mean_q: Array
    min_q: Array
    max_q: Array
    mean_td_error: Array
    cur_lr: Array
    grad_gnorm: Array
    td_error: Array  # [B], for the priority update


def empty_info() -> LearnInfo:
    """Zero learner stats (``td_error`` ``[0]``), what the metrics hold before the first SGD step."""
    return LearnInfo(*(jnp.zeros((), jnp.float32) for _ in range(7)), jnp.zeros((0,), jnp.float32))


def learning_rate(lr: Any, lr_schedule: Any, env_steps: Array) -> Array:
    """``lr``, or RLlib's piecewise-linear ``lr_schedule`` over sampled env steps."""
    if lr_schedule is None:
        return jnp.asarray(lr, jnp.float32)
    return exploration.piecewise_linear(lr_schedule, env_steps)


def clip_each_by_norm(max_norm: float) -> optax.GradientTransformation:
    """Clip every gradient tensor on its own to L2 norm ``max_norm`` (``tf.clip_by_norm``:
    ``g * max_norm / max(|g|, max_norm)``), as RLlib's tf DQN policy does per variable."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        def clip(g: Array) -> Array:
            norm = jnp.sqrt(jnp.sum(jnp.square(g)))
            return g * (max_norm / jnp.maximum(norm, max_norm))

        return jax.tree_util.tree_map(clip, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(optimizer: OptimizerConfig, *, lr: Any, adam_epsilon: Any, grad_clip: Any,
                   grad_clip_mode: str) -> optax.GradientTransformation:
    """``optimizer`` (Adam with ``adam_epsilon``, RLlib's; or RMSProp, see ``OptimizerConfig``)
    after clipping at ``grad_clip`` (None: none): the global norm over every tensor
    (``grad_clip_mode="global_norm"``, RLlib's torch policies) or each tensor's own norm
    (``"per_tensor"``, RLlib's tf policies). The learning rate is a hyper-parameter set on every
    step from the schedule."""
    if optimizer.type == "rmsprop":
        base = optax.inject_hyperparams(optax.rmsprop, static_args=("centered", "eps_in_sqrt"))(
            learning_rate=lr, decay=optimizer.decay, eps=optimizer.epsilon, centered=optimizer.centered,
            eps_in_sqrt=False)
    else:
        base = optax.inject_hyperparams(optax.adam)(learning_rate=lr, eps=adam_epsilon)
    if grad_clip is None:
        return base
    if grad_clip_mode == "per_tensor":
        return optax.chain(clip_each_by_norm(grad_clip), base)
    return optax.chain(optax.clip_by_global_norm(grad_clip), base)


def set_learning_rate(opt_state: Any, lr: Array) -> Any:
    """The optimizer state with the injected learning rate replaced by ``lr``."""

    def injected(state: Any) -> bool:  # optax's Inject*HyperparamsState (names vary by version)
        return isinstance(getattr(state, "hyperparams", None), dict) and "learning_rate" in state.hyperparams

    def visit(state: Any) -> Any:
        if injected(state):
            return state._replace(hyperparams={**state.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)})
        return state

    return jax.tree_util.tree_map(visit, opt_state, is_leaf=injected)


def init(network: QNetwork, optimizer: optax.GradientTransformation, key: Array, example_obs: Array) -> LearnerState:
    """Fresh learner state; ``example_obs`` is ``[B, *obs]`` (or ``[B, T, *obs]`` with an LSTM)."""
    params_key, noise_key = jax.random.split(key)
    params = network.init({"params": params_key, "noise": noise_key}, example_obs)
    return LearnerState(
        params=params,
        target_params=jax.tree_util.tree_map(jnp.copy, params),
        opt_state=optimizer.init(params),
        num_updates=jnp.zeros((), jnp.int32),
        last_target_update=jnp.zeros((), jnp.int32),
    )


def make_loss(loss: LossConfig, network: QNetwork) -> Callable:
    """``loss(params, target_params, items: Transition, weights, key) -> (loss, (td [B], q_selected [B],
    mean_td_error []))``: ``td`` is ``target - Q`` (C51: the cross-entropy), the priority's source;
    ``mean_td_error`` is RLlib's statistic, the mean of ``Q - target`` (C51: of the cross-entropy).
    With ``loss.h_function_epsilon`` the target is R2D2's rescaled ``h(r + discount * h^-1(Q'))``."""
    td_loss = losses.huber if loss.td_error_loss_fn == "huber" else losses.mse

    def apply(params, obs, key):
        return network.apply(params, obs, rngs={"noise": key})

    def loss_fn(params, target_params, items: Transition, weights: Array, key: Array):
        online_key, target_key, selector_key = jax.random.split(key, 3)
        out_tm1 = apply(params, items.obs, online_key)
        out_t = apply(target_params, items.next_obs, target_key)
        selector = apply(lax.stop_gradient(params), items.next_obs, selector_key) if loss.double_q else out_t
        q_selected = jnp.take_along_axis(out_tm1.q, items.action[:, None], axis=-1)[:, 0]
        if network.head.num_atoms == 1:
            if loss.h_function_epsilon is not None:  # R2D2's rescaled target
                a_t = exploration.greedy(selector.q)  # double Q: the online net picks (else the target's max)
                v_t = jnp.take_along_axis(out_t.q, a_t[:, None], axis=-1)[:, 0]
                target = losses.rescaled_target(items.reward, items.discount, v_t, loss.h_function_epsilon)
                td = lax.stop_gradient(target) - q_selected
            elif loss.double_q:
                td = jax.vmap(losses.double_q_learning_td)(
                    out_tm1.q, items.action, items.reward, items.discount, out_t.q, selector.q
                )
            else:
                td = jax.vmap(losses.q_learning_td)(out_tm1.q, items.action, items.reward, items.discount, out_t.q)
            per_item = td_loss(td)
            mean_td_error = jnp.mean(-td)
        else:
            a_t = exploration.greedy(selector.q)
            td = jax.vmap(losses.categorical_td, in_axes=(0, 0, 0, 0, 0, 0, None))(
                out_tm1.logits, items.action, items.reward, items.discount,
                jax.nn.softmax(out_t.logits, axis=-1), a_t, network.support,
            )
            per_item = td
            mean_td_error = jnp.mean(td)
        return losses.weighted_mean(per_item, weights), (td, q_selected, mean_td_error)

    return loss_fn


def make_sequence_loss(loss: LossConfig, network: QNetwork, *, gamma: Any, eta: float = 0.9) -> Callable:
    """Recurrent Q-learning on ``SequenceItem`` items (R2D2-style), with burn-in and n-step targets.

    ``items.data`` is a ``Transition`` of *one-step* transitions with leaves ``[B, L, ...]``
    (``discount`` is 0 where the episode terminated). The online and target networks are
    unrolled from ``items.init_state`` (zeros when the item has none), resetting where
    ``items.first``. The first ``burn_in`` steps only warm up the recurrent state: the online
    state after them is a ``stop_gradient``, and they carry no loss; padding (``mask`` False)
    carries none either.

    The bootstrap value of step ``t`` is the target network's Q on ``next_obs[t]`` from its state
    after ``obs[t]``: exact at every step, also at a truncation inside the slice (where
    ``next_obs`` is the old episode's final observation, not the next slot's ``obs``). n-step
    targets (``loss.n_step``) are summed inside the slice and stop at an episode's end and at
    the slice's last valid step, which then bootstraps with ``gamma ** k`` for the ``k`` steps
    taken (``losses.n_step_returns``); with ``loss.h_function_epsilon``, R2D2's rescaled target
    ``h(return + discount * h^-1(Q'))``.

    Returns ``(loss, (priority [B], q_selected [B, L], mean_td_error []))``: a sequence's priority
    is RLlib's / R2D2's mix ``eta * max|td| + (1 - eta) * mean|td|`` over its trained steps;
    ``mean_td_error`` is RLlib's statistic, the mean of ``Q - target`` over all trained steps.
    """
    td_loss = losses.huber if loss.td_error_loss_fn == "huber" else losses.mse
    burn_in, n = loss.burn_in, loss.n_step

    def unroll(params, obs, state, first, key, all_states=False):
        return network.apply(params, obs, state, first, all_states=all_states, rngs={"noise": key})

    def bootstrap_q(params, next_obs, states, key):  # Q [B, L, A] on next_obs[t] from states[t]
        batch, length = next_obs.shape[:2]
        flat = lambda x: x.reshape((batch * length, 1) + x.shape[2:])  # noqa: E731
        flat_states = jax.tree_util.tree_map(lambda s: s.reshape((batch * length,) + s.shape[2:]), states)
        q = unroll(params, flat(next_obs), flat_states, None, key)[0].q
        return q.reshape((batch, length) + q.shape[2:])

    def loss_fn(params, target_params, items, weights: Array, key: Array):
        data = items.data
        batch = items.mask.shape[0]
        has_state = bool(jax.tree_util.tree_leaves(items.init_state))
        state = items.init_state if has_state else network.initial_state(batch)
        burn_key, online_key, target_key, next_key, select_key = jax.random.split(key, 5)
        if burn_in > 0:
            _, warm = unroll(params, data.obs[:, :burn_in], state, items.first[:, :burn_in], burn_key)
            warm = lax.stop_gradient(warm)
            rest, _ = unroll(params, data.obs[:, burn_in:], warm, items.first[:, burn_in:], online_key)
            with_burn_in = lambda x: jnp.concatenate([jnp.zeros_like(x[:, :burn_in]), x], axis=1)  # noqa: E731
            q_tm1 = with_burn_in(rest.q)
        else:
            q_tm1 = unroll(params, data.obs, state, items.first, online_key)[0].q
        _, target_states = unroll(target_params, data.obs, state, items.first, target_key, all_states=True)
        q_next = bootstrap_q(target_params, data.next_obs, target_states, next_key)  # [B, L, A]
        if loss.double_q:
            frozen = lax.stop_gradient(params)
            _, online_states = unroll(frozen, data.obs, state, items.first, select_key, all_states=True)
            selector = bootstrap_q(frozen, data.next_obs, online_states, select_key)
            value = jnp.take_along_axis(q_next, exploration.greedy(selector)[..., None], axis=-1)[..., 0]
        else:
            value = jnp.max(q_next, axis=-1)  # [B, L]
        # Step t's episode ends at t when it terminated or the next slot starts a new episode;
        # the slice ends at t when the next slot is padding or t is the last slot.
        shift = lambda x, fill: jnp.concatenate([x[:, 1:], jnp.full_like(x[:, :1], fill)], axis=1)  # noqa: E731
        terminated = data.discount == 0.0
        truncated = (shift(items.first, True) | ~shift(items.mask, False)) & ~terminated
        returns, discounts, steps = jax.vmap(
            lambda r, te, tr: losses.n_step_returns(r, te, tr, gamma=gamma, n=n))(data.reward, terminated, truncated)
        last = jnp.arange(value.shape[1])[None, :] + jnp.maximum(steps, 1) - 1  # [B, L]
        value = jnp.take_along_axis(value, jnp.minimum(last, value.shape[1] - 1), axis=1)
        if loss.h_function_epsilon is None:
            target = returns + discounts * value
        else:  # R2D2's value rescaling
            target = losses.rescaled_target(returns, discounts, value, loss.h_function_epsilon)
        q_selected = jnp.take_along_axis(q_tm1, data.action[..., None], axis=-1)[..., 0]
        td = lax.stop_gradient(target) - q_selected  # [B, L]
        per_sequence = losses.masked_sequence_mean(td_loss(td), items.mask, burn_in=burn_in)
        keep = items.mask.at[:, :burn_in].set(False)
        abs_td = jnp.where(keep, jnp.abs(td), 0.0)
        priority = eta * jnp.max(abs_td, axis=1) + (1.0 - eta) * losses.masked_sequence_mean(
            jnp.abs(td), items.mask, burn_in=burn_in
        )
        mean_td_error = -jnp.sum(jnp.where(keep, td, 0.0)) / jnp.maximum(jnp.sum(keep), 1)
        q_selected = jnp.where(keep, q_selected, jnp.nan)  # statistics over trained steps only
        return losses.weighted_mean(per_sequence, weights), (priority, q_selected, mean_td_error)

    return loss_fn


class StepRecord(NamedTuple):
    """What one SGD step leaves for RLlib's learner statistics, unreduced. The plan carries its
    last step's through the loop and reduces it once per report (``Learn.statistics``): the
    other steps pay for no statistics at all (the gradient norm over every parameter and the
    batch's reductions are a dozen small kernels per step)."""

    loss: Array  # [] this device's
    q_selected: Array  # [B] (sequences: [B, L], NaN where untrained)
    mean_td_error: Array  # [] this device's
    grads: Any  # the gradients applied (averaged over devices)
    cur_lr: Array  # []


class Learn(NamedTuple):
    """The SGD step and the statistics of its record (``make_learn``)."""

    step: Callable[..., tuple[LearnerState, Array, StepRecord]]  # (state, sample, *, env_steps, key) -> (state, td_error [B], record)
    statistics: Callable[[StepRecord], LearnInfo]  # RLlib's learner stats (td_error [0])


def make_learn(loss: LossConfig, network: QNetwork, optimizer: optax.GradientTransformation, *, lr: Any,
               lr_schedule: Any = None, gamma: Any = 0.99, axis_name: str | None = None) -> Learn:
    """The pure SGD step on a replayed ``Sample`` of ``Transition`` items (or, with
    ``loss.recurrent``, of ``SequenceItem`` items: then ``td_error`` is one priority per
    sequence, and ``gamma`` discounts the n-step sums the loss takes inside each slice), and the
    reduction of a step's record to RLlib's statistics (averaged over the device axis too)."""
    loss_fn = make_sequence_loss(loss, network, gamma=gamma) if loss.recurrent else make_loss(loss, network)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def mean(x):
        return lax.pmean(x, axis_name) if axis_name is not None else x

    # Sequences mark their untrained steps NaN in ``q_selected``; feed-forward batches have none,
    # and the plain reductions are fewer kernels than the NaN-skipping ones.
    if loss.recurrent:
        q_mean, q_min, q_max = jnp.nanmean, jnp.nanmin, jnp.nanmax
    else:
        q_mean, q_min, q_max = jnp.mean, jnp.min, jnp.max

    def statistics(record: StepRecord) -> LearnInfo:
        q = record.q_selected
        return LearnInfo(
            loss=mean(record.loss),
            mean_q=mean(q_mean(q)),
            min_q=lax.pmin(q_min(q), axis_name) if axis_name else q_min(q),
            max_q=lax.pmax(q_max(q), axis_name) if axis_name else q_max(q),
            mean_td_error=mean(record.mean_td_error),
            cur_lr=record.cur_lr,
            grad_gnorm=optax.tree.norm(record.grads),
            td_error=jnp.zeros((0,), jnp.float32),
        )

    def step(state: LearnerState, sample: Sample, *, env_steps: Array, key: Array
             ) -> tuple[LearnerState, Array, StepRecord]:
        """One SGD step: the new state, the per-item TD errors ``[B]`` (the priorities' source)
        and the step's record."""
        (value, (td, q_selected, mean_td_error)), grads = grad_fn(
            state.params, state.target_params, sample.items, sample.weights, key
        )
        grads = mean(grads)
        rate = learning_rate(lr, lr_schedule, env_steps)
        opt_state = set_learning_rate(state.opt_state, rate)
        updates, opt_state = optimizer.update(grads, opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        record = StepRecord(loss=value, q_selected=q_selected, mean_td_error=mean_td_error, grads=grads, cur_lr=rate)
        return state._replace(params=params, opt_state=opt_state, num_updates=state.num_updates + 1), td, record

    return Learn(step=step, statistics=statistics)


def make_train_step(loss: LossConfig, network: QNetwork, optimizer: optax.GradientTransformation, *, lr: Any,
                    lr_schedule: Any = None, gamma: Any = 0.99, axis_name: str | None = None
                    ) -> Callable[..., tuple[LearnerState, LearnInfo]]:
    """``train_step(state, sample, *, env_steps, key) -> (state, LearnInfo)``: ``make_learn``'s
    step with its statistics and per-item TD errors, for one step on its own."""
    learn = make_learn(loss, network, optimizer, lr=lr, lr_schedule=lr_schedule, gamma=gamma, axis_name=axis_name)

    def train_step(state: LearnerState, sample: Sample, *, env_steps: Array, key: Array
                   ) -> tuple[LearnerState, LearnInfo]:
        state, td, record = learn.step(state, sample, env_steps=env_steps, key=key)
        return state, learn.statistics(record)._replace(td_error=td)

    return train_step


def sync_target(
    state: LearnerState, env_steps: Array, *, target_network_update_freq: int, tau: float = 1.0
) -> tuple[LearnerState, Array]:
    """Copy (or Polyak-average with ``tau``) the online params into the target when
    ``env_steps - last_target_update > target_network_update_freq``; returns ``(state, synced)``.

    RLlib 1.x's ``UpdateTargetNetwork`` rule, strict ``>`` included. The comparison, not
    ``env_steps % freq == 0``, fires on time whatever the step size (a modulo test with steps of
    k fires only every lcm(k, freq)).
    """
    env_steps = jnp.asarray(env_steps, jnp.int32)
    due = env_steps - state.last_target_update > target_network_update_freq
    if isinstance(tau, (int, float)) and tau == 1.0:  # a hard copy, bit for bit
        blend = lambda online, old: online  # noqa: E731
    else:
        # A traced tau (a sweep) always blends: 1 * online + 0 * old is the copy again.
        blend = lambda online, old: tau * online + (1.0 - tau) * old  # noqa: E731

    def synced(target):
        return jax.tree_util.tree_map(blend, state.params, target)

    # A conditional, not a select: most steps skip the sync and touch no parameter at all
    # (under vmap it becomes a select again, which is what vmapped seeds need anyway).
    target = lax.cond(due, synced, lambda target: target, state.target_params)
    last = jnp.where(due, env_steps, state.last_target_update)
    return state._replace(target_params=target, last_target_update=last), due
