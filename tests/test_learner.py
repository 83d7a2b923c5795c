"""The learner: a probe MDP converges to its analytic Q, pmean equals the big batch, one trace,
target syncs on time, schedules."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdqn import DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig, exploration, learner
from jaxdqn.config import QHeadConfig
from jaxdqn.networks import QNetwork
from jaxdqn.types import Sample, Transition
from tests.learner_pieces import optimizer_of, train_step_of

GAMMA = 0.9


def probe_batch():
    """Two states: from s0 any action leads to s1 (rewards 0 / 0.5); from s1 the episode
    terminates (rewards 1 / -1). Analytic: Q(s1) = (1, -1), Q(s0, a) = r0[a] + gamma * 1."""
    s0, s1 = jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0])
    obs = jnp.stack([s0, s0, s1, s1])
    return Transition(
        obs=obs,
        action=jnp.array([0, 1, 0, 1], jnp.int32),
        reward=jnp.array([0.0, 0.5, 1.0, -1.0]),
        discount=jnp.array([GAMMA, GAMMA, 0.0, 0.0]),
        next_obs=jnp.stack([s1, s1, s1, s1]),
    )


def probe_setup(config):
    """Network, fresh learner state, train step and the probe batch as a uniform sample."""
    net = QNetwork(2, config.model, config.head)
    opt = optimizer_of(config)
    batch = probe_batch()
    state = learner.init(net, opt, jax.random.key(0), batch.obs)
    sample = Sample(items=batch, indices=jnp.arange(4), weights=jnp.ones(4))
    return net, state, train_step_of(config, net, opt), sample


@pytest.mark.parametrize(
    "config",
    [
        SimpleQConfig(lr=1e-2, model=ModelConfig(fcnet_hiddens=(32,)), train_batch_size=4),
        DQNConfig(lr=1e-2, model=ModelConfig(fcnet_hiddens=(32,)), hiddens=(32,), train_batch_size=4,
                  td_error_loss_fn="mse"),
        DQNConfig(lr=1e-2, model=ModelConfig(fcnet_hiddens=(32,)), hiddens=(32,), train_batch_size=4,
                  num_atoms=41, v_min=-2.0, v_max=2.0, dueling=False),
    ],
    ids=["simple_q", "double_dueling", "c51"],
)
def test_probe_mdp_converges_to_the_analytic_q(config):
    net, state, step, sample = probe_setup(config)

    @jax.jit
    def run(state, key):
        def body(state, i):
            state, info = step(state, sample, env_steps=i, key=jax.random.fold_in(key, i))
            state, _ = learner.sync_target(state, i, target_network_update_freq=20)
            return state, info.loss
        return jax.lax.scan(body, state, jnp.arange(1500))

    state, losses_ = run(state, jax.random.key(1))
    q = net.apply(state.params, jnp.eye(2)).q
    np.testing.assert_allclose(q, [[0.0 + GAMMA, 0.5 + GAMMA], [1.0, -1.0]], atol=0.05)
    assert losses_[-100:].mean() < losses_[:100].mean()


def test_gradients_are_averaged_across_4_devices():
    cpus = jax.devices("cpu")
    assert len(cpus) == 4, "conftest forces 4 CPU devices"
    with jax.default_device(cpus[0]):  # the single-device reference too (a GPU would use TF32)
        check_gradients_are_averaged(cpus)


def check_gradients_are_averaged(devices):
    config = DQNConfig(model=ModelConfig(fcnet_hiddens=(16,)), hiddens=(16,), lr=1e-2, grad_clip=None)
    net = QNetwork(3, config.model, config.head)
    opt = optimizer_of(config)
    k = jax.random.split(jax.random.key(0), 4)
    b = 32
    items = Transition(obs=jax.random.normal(k[0], (b, 5)), action=jax.random.randint(k[1], (b,), 0, 3),
                       reward=jax.random.normal(k[2], (b,)), discount=jnp.full((b,), 0.9),
                       next_obs=jax.random.normal(k[3], (b, 5)))
    sample = Sample(items=items, indices=jnp.arange(b), weights=jnp.linspace(0.5, 1.0, b))
    state = learner.init(net, opt, jax.random.key(1), items.obs)
    single = train_step_of(config, net, opt)
    one, info = jax.jit(lambda s, x: single(s, x, env_steps=0, key=jax.random.key(2)))(state, sample)
    multi = train_step_of(config, net, opt, axis_name="d")
    shards = jax.tree_util.tree_map(lambda x: x.reshape((4, b // 4) + x.shape[1:]), sample)
    replicated = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 4), state)
    step = jax.pmap(lambda s, x: multi(s, x, env_steps=0, key=jax.random.key(2)), axis_name="d", devices=devices)
    many, infos = step(replicated, shards)
    for leaf_one, leaf_many in zip(jax.tree_util.tree_leaves(one.params), jax.tree_util.tree_leaves(many.params)):
        np.testing.assert_allclose(leaf_many[0], leaf_one, rtol=1e-5, atol=1e-6)
        for d in range(1, 4):  # replicated params stay bitwise equal
            np.testing.assert_array_equal(leaf_many[d], leaf_many[0])
    np.testing.assert_allclose(infos.loss[0], info.loss, rtol=1e-5)
    np.testing.assert_allclose(infos.max_q[0], info.max_q, rtol=1e-5)
    np.testing.assert_allclose(np.concatenate(list(infos.td_error)), info.td_error, rtol=1e-5, atol=1e-6)


def test_train_step_traces_once():
    config = DQNConfig(model=ModelConfig(fcnet_hiddens=(8,)), hiddens=(8,))
    _, state, step, sample = probe_setup(config)
    batch = sample.items

    @jax.jit
    @chex.assert_max_traces(n=1)
    def jitted(state, sample, env_steps, key):
        return step(state, sample, env_steps=env_steps, key=key)

    for i in range(3):
        sample = Sample(items=batch, indices=jnp.arange(4), weights=jnp.full((4,), 1.0 - 0.1 * i))
        state, info = jitted(state, sample, jnp.int32(i * 4), jax.random.key(i))
    assert int(state.num_updates) == 3


@pytest.mark.parametrize("step, want", [
    (3, [12, 24, 36, 48, 60, 72, 84, 96]),  # never only every lcm(3, 10) = 30
    (5, [15, 30, 45, 60, 75, 90]),  # strict: 10 - 0 is not more than 10
])
def test_target_syncs_when_more_than_freq_steps_were_sampled(step, want):
    """RLlib 1.x's UpdateTargetNetwork: sync when sampled - last_update > freq."""
    config = DQNConfig(model=ModelConfig(fcnet_hiddens=(4,)), hiddens=(4,))
    net = QNetwork(2, config.model, config.head)
    opt = optimizer_of(config)
    state = learner.init(net, opt, jax.random.key(0), jnp.zeros((1, 2)))
    synced_at, last = [], 0
    expected = []
    for t in range(step, 100, step):
        state = state._replace(params=jax.tree_util.tree_map(lambda x: x + 1.0, state.params))
        state, synced = learner.sync_target(state, t, target_network_update_freq=10)
        if synced:
            synced_at.append(t)
            jax.tree_util.tree_map(np.testing.assert_array_equal, state.target_params, state.params)
        if t - last > 10:
            expected.append(t)
            last = t
    assert synced_at == expected == want


def test_polyak_tau():
    state = learner.LearnerState(params={"w": jnp.ones(3)}, target_params={"w": jnp.zeros(3)}, opt_state=(),
                                 num_updates=jnp.int32(0), last_target_update=jnp.int32(0))
    state, synced = learner.sync_target(state, 5, target_network_update_freq=1, tau=0.25)
    assert bool(synced)
    np.testing.assert_allclose(state.target_params["w"], 0.25)


def test_lr_schedule_and_epsilon_follow_rllib_piecewise_schedules():
    config = DQNConfig(lr_schedule=[[0, 1e-3], [1000, 1e-4]])
    for t, want in [(0, 1e-3), (500, 5.5e-4), (1000, 1e-4), (5000, 1e-4)]:
        assert float(learner.learning_rate(config.lr, config.lr_schedule, t)) == pytest.approx(want, rel=1e-5)
    expl = config.exploration_config  # 1.0 -> 0.02 over 10k
    for t, want in [(0, 1.0), (5000, 0.51), (10_000, 0.02), (20_000, 0.02)]:
        assert float(exploration.epsilon(expl, t)) == pytest.approx(want, rel=1e-5)
    assert float(exploration.epsilon(type(expl)(epsilon_timesteps=0), 0)) == pytest.approx(0.02)


def test_cur_lr_is_reported_and_applied():
    config = DQNConfig(lr_schedule=[[0, 1e-2], [10, 0.0]], model=ModelConfig(fcnet_hiddens=(4,)), grad_clip=None,
                       double_q=False, dueling=False, hiddens=())
    net, state, step, sample = probe_setup(config)
    new, info = step(state, sample, env_steps=jnp.int32(10), key=jax.random.key(0))  # lr is 0 there
    assert float(info.cur_lr) == 0.0
    jax.tree_util.tree_map(np.testing.assert_array_equal, new.params, state.params)
    new, info = step(state, sample, env_steps=jnp.int32(5), key=jax.random.key(0))
    assert float(info.cur_lr) == pytest.approx(5e-3)
    assert not np.allclose(jax.tree_util.tree_leaves(new.params)[0], jax.tree_util.tree_leaves(state.params)[0])


def test_epsilon_greedy():
    q = jnp.tile(jnp.array([[0.0, 5.0, 1.0]]), (4000, 1))
    np.testing.assert_array_equal(exploration.epsilon_greedy(jax.random.key(0), q, 0.0), 1)
    actions = np.asarray(exploration.epsilon_greedy(jax.random.key(1), q, 1.0))
    counts = np.bincount(actions, minlength=3) / len(actions)
    np.testing.assert_allclose(counts, 1 / 3, atol=0.03)
    actions = np.asarray(exploration.epsilon_greedy(jax.random.key(2), q, 0.3))
    assert abs((actions != 1).mean() - 0.3 * 2 / 3) < 0.03


def test_noisy_nets_explore_through_their_noise_and_epsilon():
    """As RLlib's DQN: noisy layers change the greedy action from call to call, and the
    exploration_config's epsilon still applies on top (epsilon 0: noise only)."""
    from jaxdqn.networks import QNetwork

    net = QNetwork(4, ModelConfig(fcnet_hiddens=(16,)), QHeadConfig(hiddens=(16,), noisy=True, sigma0=2.0))
    obs = jnp.ones((1, 3))
    params = net.init({"params": jax.random.key(0), "noise": jax.random.key(1)}, obs)
    actions = {
        int(exploration.epsilon_greedy(jax.random.key(9), net.apply(params, obs, rngs={"noise": jax.random.key(i)}).q,
                                       0.0)[0])
        for i in range(60)
    }
    assert len(actions) > 1  # the noise alone changes the greedy action
    q = net.apply(params, obs, deterministic=True).q
    drawn = [int(exploration.epsilon_greedy(jax.random.key(i), q, 1.0)[0]) for i in range(200)]
    assert set(drawn) == {0, 1, 2, 3}  # epsilon 1 on the same Q-values: uniform actions


def test_behaviour_epsilon_is_zero_without_exploration():
    config = ExplorationConfig(initial_epsilon=1.0, final_epsilon=0.1, epsilon_timesteps=100)
    assert float(exploration.behaviour_epsilon(config, 50, explore=True)) == pytest.approx(0.55)
    assert float(exploration.behaviour_epsilon(config, 50, explore=False)) == 0.0


@pytest.mark.parametrize("mode", ["global_norm", "per_tensor"])
def test_gradient_clipping_modes_match_their_formulas(mode):
    """global_norm: every tensor scaled by c / max(c, ||all||) (torch's clip_grad_norm_, RLlib's
    torch policies); per_tensor: each by c / max(c, ||g||) (tf.clip_by_norm, RLlib's tf ones)."""
    rng = np.random.default_rng(0)
    steps = [{"a": rng.normal(size=(3, 4)).astype(np.float32) * 5, "b": rng.normal(size=(2,)).astype(np.float32) * 0.1},
             {"a": rng.normal(size=(3, 4)).astype(np.float32) * 0.01, "b": rng.normal(size=(2,)).astype(np.float32) * 3}]
    clip = 1.0

    def clipped(g):
        if mode == "per_tensor":
            return {k: v * clip / max(clip, np.linalg.norm(v)) for k, v in g.items()}
        total = np.sqrt(sum(np.sum(v ** 2) for v in g.values()))
        return {k: v * clip / max(clip, total) for k, v in g.items()}

    if mode == "per_tensor":
        clip_fn = learner.clip_each_by_norm(clip)
        out, _ = clip_fn.update(jax.tree_util.tree_map(jnp.asarray, steps[0]), clip_fn.init(steps[0]))
        for k in out:
            np.testing.assert_allclose(out[k], clipped(steps[0])[k], rtol=1e-6)
    # The optimizer of the mode: Adam on the clipped gradients (two steps, so that the clip's
    # scale shows in Adam's moments).
    params = jax.tree_util.tree_map(jnp.zeros_like, steps[0])
    opt = optimizer_of(DQNConfig(grad_clip=clip, grad_clip_mode=mode, lr=0.1))
    adam = optax.adam(0.1, eps=1e-8)
    state, ref_state = opt.init(params), adam.init(params)
    for g in steps:
        update, state = opt.update(jax.tree_util.tree_map(jnp.asarray, g), state, params)
        want, ref_state = adam.update(jax.tree_util.tree_map(jnp.asarray, clipped(g)), ref_state, params)
        for k in g:
            np.testing.assert_allclose(update[k], want[k], rtol=1e-5, atol=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0.0, 1.0, width=32)), min_size=2, max_size=5,
                unique_by=lambda p: p[0]),
       st.lists(st.integers(-100, 12_000), min_size=1, max_size=8))
def test_piecewise_linear_matches_numpy_interp_from_the_first_point_on(points, times):
    """Inside the points ``np.interp``; before the first, RLlib's ``outside_value``: the last value
    (``lr_schedule: [[1000, 1e-3], [2000, 1e-4]]`` trains at 1e-4 until step 1000, as in RLlib)."""
    points = sorted(points)
    schedule = jax.jit(lambda t: exploration.piecewise_linear(points, t))
    want = np.where(np.asarray(times) < points[0][0], points[-1][1],
                    np.interp(times, [p[0] for p in points], [p[1] for p in points]))
    got = [float(schedule(jnp.int32(t))) for t in times]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("centered", [True, False])
def test_rmsprop_is_pytorchs(centered):
    """``optimizer: {type: rmsprop}`` is torch.optim.RMSprop (the MinAtar reference's): a numpy
    transcription of its update over random gradients, with the learning rate set per step."""
    rng = np.random.default_rng(1)
    decay, eps, shape = 0.9, 0.05, (3, 2)
    config = DQNConfig(optimizer={"type": "rmsprop", "decay": decay, "epsilon": eps, "centered": centered},
                       grad_clip=None, lr=0.1)
    opt = optimizer_of(config)
    params = {"w": jnp.zeros(shape)}
    state = opt.init(params)
    v, m = np.zeros(shape), np.zeros(shape)
    for step in range(5):
        g = rng.normal(size=shape).astype(np.float32)
        lr = 0.1 / (step + 1)
        state = learner.set_learning_rate(state, lr)
        update, state = opt.update({"w": jnp.asarray(g)}, state, params)
        v = decay * v + (1 - decay) * g ** 2  # torch: square_avg.mul_(alpha).addcmul_(g, g, 1 - alpha)
        denom = v
        if centered:
            m = decay * m + (1 - decay) * g  # grad_avg.lerp_(g, 1 - alpha)
            denom = v - m ** 2
        want = -lr * g / (np.sqrt(denom) + eps)
        np.testing.assert_allclose(np.asarray(update["w"]), want, rtol=1e-5, atol=1e-7)


def test_optimizer_keys_are_checked():
    with pytest.raises(ValueError, match=r"optimizer.type='sgd'.*\['adam', 'rmsprop'\]"):
        DQNConfig(optimizer={"type": "sgd"})
    with pytest.raises(ValueError, match=r"optimizer.centered=False.*'rmsprop' only"):
        DQNConfig(optimizer={"centered": False})
    with pytest.raises(ValueError, match=r"adam_epsilon=0.0001.*Adam only.*optimizer.epsilon"):
        DQNConfig(optimizer={"type": "rmsprop"}, adam_epsilon=1e-4)
    with pytest.raises(ValueError, match=r"unknown config key 'optimizer.eps'.*optimizer.epsilon"):
        DQNConfig(optimizer={"type": "rmsprop", "eps": 0.1})
    # RLlib's empty dict is Adam, as there.
    assert jaxdqn_from_rllib({"optimizer": {}}).optimizer.type == "adam"


def jaxdqn_from_rllib(d):
    from jaxdqn import from_rllib

    return from_rllib(d, "dqn")


@pytest.mark.parametrize("double_q, use_h", [(True, False), (False, False), (True, True), (False, True)])
def test_double_q_selects_with_the_online_network_and_evaluates_with_the_target(double_q, use_h):
    """Hand-computed targets with online and target parameters that disagree: double Q takes
    argmax_a Q_online(s', a) and its value under Q_target (van Hasselt et al. 2016); plain DQN
    max_a Q_target(s', a). A swap of the two networks gives other numbers. With
    ``use_h_function``, R2D2's target h(r + discount * h^-1(value)), RLlib's R2D2 loss."""
    config = DQNConfig(model=ModelConfig(fcnet_hiddens=(8,)), hiddens=(), dueling=False, double_q=double_q,
                       td_error_loss_fn="mse", use_h_function=use_h, h_function_epsilon=0.05)
    net = QNetwork(3, config.model, config.head)
    rng = np.random.default_rng(0)
    obs, next_obs = (jnp.asarray(rng.normal(size=(16, 4)), jnp.float32) for _ in range(2))
    online = net.init(jax.random.key(1), obs)
    target = net.init(jax.random.key(2), obs)
    q = lambda params, x: np.asarray(net.apply(params, x).q, np.float64)  # noqa: E731
    q_next_online, q_next_target, q_now = q(online, next_obs), q(target, next_obs), q(online, obs)
    assert (q_next_online.argmax(1) != q_next_target.argmax(1)).sum() >= 4  # the two choices differ
    batch = Transition(obs=obs, action=jnp.asarray(rng.integers(0, 3, 16), jnp.int32),
                       reward=jnp.asarray(rng.normal(size=16), jnp.float32),
                       discount=jnp.asarray(np.where(rng.random(16) < 0.2, 0.0, 0.9), jnp.float32),
                       next_obs=next_obs)
    rows = np.arange(16)
    if double_q:
        bootstrap = q_next_target[rows, q_next_online.argmax(1)]
    else:
        bootstrap = q_next_target.max(1)
    reward, discount = np.asarray(batch.reward, np.float64), np.asarray(batch.discount, np.float64)
    if use_h:
        eps = 0.05
        h = lambda x: np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x  # noqa: E731
        # h^-1 by bisection on h (strictly increasing), independent of the closed form
        lo, hi = np.full(16, -1e4), np.full(16, 1e4)
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = np.where(h(mid) < bootstrap, mid, lo), np.where(h(mid) < bootstrap, hi, mid)
        target_value = h(reward + discount * (lo + hi) / 2)
    else:
        target_value = reward + discount * bootstrap
    td = target_value - q_now[rows, np.asarray(batch.action)]
    loss, (got_td, q_selected, mean_td_error) = learner.make_loss(config.loss, net)(
        online, target, batch, jnp.ones(16), jax.random.key(3))
    np.testing.assert_allclose(got_td, td, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, np.mean(0.5 * td**2), rtol=1e-5)  # RLlib's MSE: 0.5 * td^2
    np.testing.assert_allclose(mean_td_error, np.mean(-td), rtol=1e-4, atol=1e-6)
