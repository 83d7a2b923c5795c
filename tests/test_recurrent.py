"""Recurrent DQN: the sequence loss against a step-by-step reference, burn-in and padding, and
the plan's stored sequences against the actor's own recurrent states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig, learner, plan
from jaxdqn.buffers import segment_tree
from jaxdqn.networks import QNetwork
from jaxdqn.types import Sample, SequenceItem, Transition
from tests.learner_pieces import optimizer_of, sequence_loss_of, train_step_of


@pytest.fixture(autouse=True)
def float32_matmuls():
    """The references here are step-by-step float32 computations; on a GPU, JAX's default f32
    matmuls run in TF32 (about 1e-4 relative), which would swamp the comparison."""
    with jax.default_matmul_precision("float32"):
        yield


GAMMA = 0.9


def sequence_items(batch=3, length=6, obs_dim=3, seed=0, with_state=False):
    """Random one-step sequences with the cases the loss must get right: padding at the end
    (item 0), an episode start mid-slice after a truncation (item 1), a termination (item 2)."""
    k = jax.random.split(jax.random.key(seed), 6)
    data = Transition(
        obs=jax.random.normal(k[0], (batch, length, obs_dim)),
        action=jax.random.randint(k[1], (batch, length), 0, 2),
        reward=jax.random.normal(k[2], (batch, length)),
        discount=jnp.full((batch, length), GAMMA).at[2, 3].set(0.0).at[2, 1].set(0.0),
        next_obs=jax.random.normal(k[3], (batch, length, obs_dim)),
    )
    mask = jnp.ones((batch, length), bool).at[0, -2:].set(False)
    first = jnp.zeros((batch, length), bool).at[1, 3].set(True).at[2, 4].set(True).at[2, 2].set(True)
    init_state = ()
    if with_state:
        init_state = (jax.random.normal(k[4], (batch, 8)), jax.random.normal(k[5], (batch, 8)))
    return SequenceItem(data=data, mask=mask, first=first, init_state=init_state)


def recurrent_setup(burn_in=2, n_step=1, double_q=True, with_state=False, use_h_function=False):
    config = DQNConfig(model=ModelConfig(fcnet_hiddens=(8,), use_lstm=True, lstm_cell_size=8),
                       hiddens=(8,), replay_sequence_length=6, burn_in=burn_in, prioritized_replay=True,
                       gamma=GAMMA, n_step=n_step, double_q=double_q, buffer_size=600,
                       use_h_function=use_h_function, h_function_epsilon=0.01)
    net = QNetwork(2, config.model, config.head)
    opt = optimizer_of(config)
    items = sequence_items(with_state=with_state)
    state = learner.init(net, opt, jax.random.key(0), items.data.obs)
    # a target that differs from the online net, so that selection and evaluation differ
    state = state._replace(target_params=jax.tree_util.tree_map(lambda p: p * 0.7 + 0.05, state.params))
    return config, net, opt, items, state


def h(x, eps):  # R2D2's value rescaling (Pohlen et al. 2018, eq. 2)
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def h_inverse(x, eps):  # the inverse, solved numerically: h is strictly increasing
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if h(mid, eps) < x else (lo, mid)
    return (lo + hi) / 2


def reference_td(net, params, target_params, items, *, burn_in, n, double_q, h_epsilon=None):
    """TD errors ``[B, L]`` (nan where untrained) by stepping the networks one step at a time in
    Python: the state at each step is rebuilt from the slice's start, and the n-step target is
    summed with a plain loop that stops at an episode's end and at the slice's last valid step
    (with ``h_epsilon``, R2D2's rescaled target ``h(return + scale * h^-1(value))``)."""
    data = jax.tree_util.tree_map(np.asarray, items.data)
    mask, first = np.asarray(items.mask), np.asarray(items.first)
    batch, length = mask.shape
    apply = jax.jit(net.apply)  # one step [1, 1, ...] at a time: one compile, then fast calls

    def states_after(p, b):  # the state after each obs[t] of item b, from its initial state
        if jax.tree_util.tree_leaves(items.init_state):
            state = jax.tree_util.tree_map(lambda s: s[b:b + 1], items.init_state)
        else:
            state = net.initial_state(1)
        out, qs = [], []
        for t in range(length):
            o, state = apply(p, data.obs[b:b + 1, t:t + 1], state, jnp.asarray(first[b:b + 1, t:t + 1]))
            out.append(state)
            qs.append(np.asarray(o.q[0, 0]))
        return out, qs

    def q_next(p, state, b, t):  # Q on next_obs[t] from the state after obs[t]
        o, _ = apply(p, data.next_obs[b:b + 1, t:t + 1], state, jnp.zeros((1, 1), bool))
        return np.asarray(o.q[0, 0])

    td = np.full((batch, length), np.nan)
    for b in range(batch):
        online_states, online_q = states_after(params, b)
        target_states, _ = states_after(target_params, b)
        for t in range(burn_in, length):
            if not mask[b, t]:
                continue
            ret, scale, k = 0.0, 1.0, t
            while True:
                ret += scale * data.reward[b, k]
                if data.discount[b, k] == 0.0:  # terminated: no bootstrap
                    scale = 0.0
                    break
                scale *= GAMMA
                ended = k + 1 == length or first[b, k + 1] or not mask[b, k + 1]
                if ended or k - t + 1 == n:
                    break
                k += 1
            value = 0.0
            if scale:
                q_t = q_next(target_params, target_states[k], b, k)
                if double_q:
                    value = q_t[np.argmax(q_next(params, online_states[k], b, k))]
                else:
                    value = q_t.max()
            if h_epsilon is None:
                target = ret + scale * value
            else:
                target = h(ret + scale * h_inverse(value, h_epsilon), h_epsilon)
            td[b, t] = target - online_q[t][data.action[b, t]]
    return td


@pytest.mark.parametrize("burn_in,n,double_q,with_state,use_h", [
    (2, 1, True, False, False), (0, 3, False, True, False), (1, 2, True, True, False), (1, 2, True, False, True)])
def test_sequence_loss_matches_a_step_by_step_reference(burn_in, n, double_q, with_state, use_h):
    config, net, _, items, state = recurrent_setup(burn_in=burn_in, n_step=n, double_q=double_q,
                                                   with_state=with_state, use_h_function=use_h)
    weights = jnp.array([1.0, 0.5, 0.25])
    loss, (priority, q_selected, mean_td_error) = jax.jit(sequence_loss_of(config, net, eta=0.9))(
        state.params, state.target_params, items, weights, jax.random.key(1))
    td = reference_td(net, state.params, state.target_params, items, burn_in=burn_in, n=n, double_q=double_q,
                      h_epsilon=0.01 if use_h else None)
    trained = ~np.isnan(td)
    abs_td = np.abs(td)
    huber = np.where(abs_td <= 1.0, 0.5 * td**2, abs_td - 0.5)
    per_sequence = np.nansum(huber, axis=1) / trained.sum(axis=1)
    np.testing.assert_allclose(float(loss), np.mean(np.asarray(weights) * per_sequence), rtol=1e-4)
    expected_priority = 0.9 * np.nanmax(abs_td, axis=1) + 0.1 * np.nanmean(abs_td, axis=1)
    np.testing.assert_allclose(np.asarray(priority), expected_priority, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(np.asarray(q_selected)), ~trained)
    # RLlib's statistic: the mean of Q - target over every trained step (td is target - Q)
    np.testing.assert_allclose(float(mean_td_error), -np.nanmean(td), rtol=1e-4, atol=1e-6)


def test_burn_in_steps_carry_no_gradient_and_padding_no_loss():
    config, net, opt, items, state = recurrent_setup(burn_in=2)
    loss_fn = sequence_loss_of(config, net)

    def loss_of_obs(obs):
        data = items.data._replace(obs=obs)
        return loss_fn(state.params, state.target_params, items._replace(data=data), jnp.ones(3), jax.random.key(1))[0]

    grad = jax.jit(jax.grad(loss_of_obs))(items.data.obs)
    np.testing.assert_array_equal(grad[:, :2], 0.0)  # burn-in inputs: no gradient
    assert np.abs(grad[:, 2:]).sum() > 0
    np.testing.assert_array_equal(grad[0, -2:], 0.0)  # padding: no loss, no gradient
    changed = items.data.reward.at[0, -2:].set(100.0)  # rewards under padding change nothing
    a = loss_fn(state.params, state.target_params, items, jnp.ones(3), jax.random.key(1))
    b = loss_fn(state.params, state.target_params, items._replace(data=items.data._replace(reward=changed)),
                jnp.ones(3), jax.random.key(1))
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)


def test_recurrent_train_step_gives_one_priority_per_sequence():
    config, net, opt, items, state = recurrent_setup(burn_in=2)
    step = jax.jit(lambda s, x: train_step_of(config, net, opt)(s, x, env_steps=0, key=jax.random.key(2)))
    sample = Sample(items=items, indices=jnp.arange(3), weights=jnp.ones(3))
    new, info = step(state, sample)
    assert info.td_error.shape == (3,) and bool(jnp.all(info.td_error >= 0))
    assert np.isfinite(float(info.mean_q)) and float(info.min_q) <= float(info.max_q)
    # the train step hands the loss's per-sequence priorities on for the buffer update
    _, (priority, _, _) = sequence_loss_of(config, net)(
        state.params, state.target_params, items, jnp.ones(3), jax.random.key(2))
    np.testing.assert_allclose(info.td_error, priority, rtol=1e-5)


def small_recurrent_config(**overrides):
    base = dict(env="MemoryChain-bsuite", env_params={"memory_length": 3},
                model=ModelConfig(use_lstm=True, lstm_cell_size=8, fcnet_hiddens=(8,)), hiddens=(8,),
                replay_sequence_length=5, burn_in=2, rollout_fragment_length=4, num_envs_per_worker=3,
                train_batch_size=4, buffer_size=300, learning_starts=36, timesteps_per_iteration=24,
                total_timesteps=48, zero_init_states=False, n_step=2)
    base.update(overrides)
    return DQNConfig(**base)


def test_stored_sequences_start_from_the_actors_recurrent_state():
    """Every stored slice: ``first`` marks the episode starts of MemoryChain (episodes of 4 steps,
    so a start every 4th step of an env), the data is the rollout's, and the stored initial state
    is the state the actor had, i.e. the state the network reaches by replaying the episode so far
    from zeros, which we rebuild from the previous slices of the same env."""
    config = small_recurrent_config()
    p = plan.make_plan(config)
    state = jax.jit(p.init)(jax.random.key(0))  # 24 warm-up steps: 2 stores of 4 steps x 3 envs
    buf = state.buffer["default_policy"].storage
    num = int(buf.size)
    # stride 3, fragment 4: 2 slices per env per fragment; 2 stores -> 12 items, slice-major per store
    assert num == 12
    items = jax.tree_util.tree_map(lambda x: np.asarray(x[:num]), buf.storage)
    net, params = p.networks["default_policy"], state.learner["default_policy"].params
    for store in range(2):
        for k in range(2):
            for e in range(3):
                i = store * 6 + k * 3 + e
                t0 = store * 4 + k * 3 - 2  # global time of the slice's step 0 (burn-in included)
                for j in range(5):
                    t = t0 + j
                    # burn-in steps of an earlier episode than the first trained step are masked
                    valid = 0 <= t < (store + 1) * 4 and (j >= 2 or t // 4 == (t0 + 2) // 4)
                    assert bool(items.mask[i, j]) == valid, (i, j)
                    if valid:
                        assert bool(items.first[i, j]) == (t % 4 == 0)
                        # gymnax's MemoryChain shows the pre-step time: 0, 0, 1, 2 in an episode
                        np.testing.assert_allclose(items.data.obs[i, j, 0], 1 - max(t % 4 - 1, 0) / 3, atol=1e-6)
                if not items.mask[i, 0]:  # padding or another episode at step 0: zero state
                    np.testing.assert_array_equal(items.init_state[0][i], 0.0)
                    continue
                # the actor's state before step t0: replay the episode's steps before it from zeros
                ep_start = t0 - t0 % 4
                s = net.initial_state(1)
                for t in range(ep_start, t0):
                    src = (t // 4) * 6 + ((t % 4) // 3) * 3 + e  # an item holding step t ...
                    j = t - ((t // 4) * 4 + ((t % 4) // 3) * 3 - 2)  # ... at this slot
                    _, s = net.apply(params, items.data.obs[src:src + 1, j:j + 1], s, jnp.array([[t == ep_start]]))
                # the actor acted with the params of the time; they never changed during warm-up
                np.testing.assert_allclose(items.init_state[0][i], np.asarray(s[0][0]), rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(items.init_state[1][i], np.asarray(s[1][0]), rtol=1e-4, atol=1e-5)


def test_trainer_round_trips_a_recurrent_run_and_acts_with_state(tmp_path):
    from jaxdqn import Trainer

    config = small_recurrent_config(total_timesteps=1000)
    trainer = Trainer(config)
    first = trainer.train()
    # RLlib's first result at max(learning_starts 36, timesteps_per_iteration 24): the store that
    # brings the buffer to 36 steps, then one replay of 4 sequences x 5 steps (round robin [1, 1])
    assert first["timesteps_total"] == 36
    assert first["info"]["num_steps_trained"] == 1 * 4 * 5
    path = trainer.save(tmp_path)
    after = trainer.train()
    buffer = trainer.state.buffer["default_policy"]
    priorities = np.asarray(segment_tree.leaf_values(buffer.trees, capacity=buffer.storage.storage.mask.shape[0]))[0]
    assert np.unique(priorities[priorities > 0]).size > 4  # replayed sequences got their own priority
    evaluation = trainer.evaluate()["evaluation"]
    assert set(evaluation["hist_stats"]["episode_reward"]) <= {-1.0, 1.0}  # MemoryChain: +-1 per episode
    assert evaluation["episode_len_mean"] == 4
    restored = Trainer(config)
    restored.restore(path)
    again = restored.train()  # the buffer of sequences, LSTM states and actor memory came back exactly
    assert again["info"]["learner"]["default_policy"]["learner_stats"]["loss"] == \
        after["info"]["learner"]["default_policy"]["learner_stats"]["loss"]
    # RLlib's recurrent compute_single_action: (action, state_out), fed back step by step, equals
    # the network unrolled over the episode
    obs = np.asarray(jax.random.normal(jax.random.key(3), (4, 3)))
    state, actions = None, []
    for o in obs:
        action, state = trainer.compute_single_action(o, state, explore=False)
        actions.append(action)
    assert [s.shape for s in state] == [(8,), (8,)]
    out, _ = trainer.plan.networks["default_policy"].apply(trainer.params["default_policy"], jnp.asarray(obs)[None], deterministic=True)
    assert actions == [int(a) for a in np.argmax(np.asarray(out.q[0]), axis=-1)]
    with pytest.raises(ValueError, match="state must be"):
        trainer.compute_single_action(obs[0], [np.zeros(3)])
