"""The execution plan: replay ratio, target syncs, one trace per chunk, independent seeds."""

import fractions
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdqn import DQNConfig, ModelConfig, SimpleQConfig
from jaxdqn.plan import make_plan, make_schedule, make_train, plan_key

TINY = dict(buffer_size=2000, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=256,
            total_timesteps=512, model=ModelConfig(fcnet_hiddens=(16,)), train_batch_size=16)
# DQN reduced to SimpleQ's network and replay, where a test needs DQN-only keys (training_intensity).
PLAIN = dict(TINY, prioritized_replay=False, double_q=False, dueling=False, hiddens=())


def replays_after(config, stores):
    """Replay steps RLlib's round robin makes after ``stores`` store steps at ``training_intensity``,
    in exact arithmetic (the decimal the user wrote): floor(stores * intensity * per_store / per_replay)."""
    if config.training_intensity is None:  # RLlib's native ratio: one replay per store
        return stores
    per_store = config.rollout_fragment_length * config.num_envs
    return math.floor(stores * fractions.Fraction(str(config.training_intensity)) * per_store
                      / config.train_batch_size)


@pytest.mark.parametrize("intensity", [None, 4.0, 6.0, 1.0, 1.5, 0.08, 0.3, 2.7, 13.37, 0.77, 0.013])
def test_replays_follow_training_intensity_exactly(intensity):
    """After any number of store steps, the replays made are those of the exact ratio, rounded
    down: 0.08 stays 0.08 (not 1/64 replays per store), 0.3 stays 0.3."""
    config = DQNConfig(**{**PLAIN, "training_intensity": intensity, "timesteps_per_iteration": 512})
    plan = make_plan(config)
    state = jax.jit(plan.init)(jax.random.key(0))
    iteration = jax.jit(plan.iteration)
    stores = 0
    for _ in range(3 * plan.schedule.iterations_per_chunk):
        state = iteration(state)[0]
        stores += plan.schedule.stores_per_iteration
        trained = int(state.metrics.num_steps_trained) // config.train_batch_size
        if plan.schedule.credit:  # exact after every store
            assert trained == replays_after(config, stores)
    assert trained == replays_after(config, stores)  # a static schedule: after whole iterations
    want = intensity or config.train_batch_size / (config.rollout_fragment_length * config.num_envs)
    sampled = stores * plan.schedule.steps_per_store
    assert abs(trained * config.train_batch_size - want * sampled) < config.train_batch_size


# RLlib's defaults: 4 env steps per store, 32 per replay, so replays per store = intensity / 8.
@pytest.mark.parametrize("intensity, stores, replays, credit", [
    (12.0, 2, 3, False), (64.0, 1, 8, False), (0.08, 100, 1, True), (0.3, 80, 3, True), (2.7, 80, 27, True)])
def test_the_schedule_is_static_for_small_fractions_and_a_credit_otherwise(intensity, stores, replays, credit):
    config = DQNConfig(training_intensity=intensity)
    schedule = make_schedule(config)
    ratio = fractions.Fraction(replays, stores)
    assert fractions.Fraction(schedule.replays, schedule.stores) == ratio
    assert schedule.credit == credit
    if credit:  # an iteration is one store; a static one all of its stores
        assert schedule.stores_per_iteration == 1
    else:
        assert schedule.stores_per_iteration == schedule.stores


def test_a_tiny_or_absurd_training_intensity_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="training_intensity"):
        make_schedule(DQNConfig(**{**PLAIN, "training_intensity": 1e-9}))


def test_target_syncs_when_more_than_freq_steps_were_sampled():
    config = SimpleQConfig(target_network_update_freq=48, **TINY)  # stores of 16 steps
    schedule = make_schedule(config)
    plan = make_plan(config)
    init, chunk = plan.init, plan.chunk
    state = jax.jit(init)(jax.random.key(0))
    sampled = int(state.metrics.num_steps_sampled)
    state, report = jax.jit(chunk)(state)
    # RLlib 1.x's UpdateTargetNetwork over the same schedule: a replay syncs when sampled - last > freq
    # (strictly: with steps of 16 and freq 48 every 64 steps, not every 48).
    last, count = 0, 0
    for _ in range(schedule.iterations_per_chunk):
        sampled += schedule.stores * schedule.steps_per_store
        for _ in range(schedule.replays):
            if sampled - last > 48:
                count, last = count + 1, sampled
    assert int(report["num_target_updates"]) == count > 3
    assert int(report["last_target_update_ts"]) == last
    assert int(report["num_steps_sampled"]) == sampled


def test_the_chunk_traces_once_and_donates_the_state():
    config = DQNConfig(**TINY, hiddens=(16,))
    plan = make_plan(config)
    init, chunk = plan.init, plan.chunk
    traced = jax.jit(chex.assert_max_traces(chunk, n=1), donate_argnums=0)
    state = jax.jit(init)(jax.random.key(0))
    for _ in range(3):
        old = state.buffer["default_policy"].storage.storage.obs
        state, report = traced(state)
        assert old.is_deleted()
    assert int(report["num_steps_sampled"]) > 3 * 200


def test_vmapped_seeds_train_independently():
    config = SimpleQConfig(**TINY)
    train = make_train(config)
    states, reports = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 3))
    leaves = jax.tree_util.tree_leaves(states.learner["default_policy"].params)
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert not np.allclose(leaves[0][a], leaves[0][b])
    assert reports["episodes_total"].shape[0] == 3
    np.testing.assert_array_equal(reports["num_steps_sampled"][0], reports["num_steps_sampled"][1])


def test_episode_metrics_follow_the_episodes():
    config = SimpleQConfig(**TINY)
    plan = make_plan(config)
    init, chunk = plan.init, plan.chunk
    state, report = jax.jit(chunk)(jax.jit(init)(jax.random.key(1)))
    assert int(report["episodes_total"]) > 0
    assert 8 <= float(report["episode_reward_min"]) <= float(report["episode_reward_mean"]) <= float(
        report["episode_reward_max"]) <= 500
    # CartPole gives +1 per step: return equals length.
    assert float(report["episode_len_mean"]) == pytest.approx(float(report["episode_reward_mean"]))


def test_before_learn_on_batch_sees_every_replayed_batch():
    """A hook that zeroes the importance weights zeroes the gradient: Adam leaves the params
    exactly as initialised, while the unhooked run moves them."""
    config = SimpleQConfig(**TINY)

    def zero_weights(sample, key):
        return sample._replace(weights=jnp.zeros_like(sample.weights))

    def params_after(hook):
        plan = make_plan(config, before_learn_on_batch=hook)
        state = jax.jit(plan.init)(jax.random.key(0))
        start = state.learner["default_policy"].params
        state, report = jax.jit(plan.chunk)(state)
        assert int(report["num_steps_trained"]) > 0
        return start, state.learner["default_policy"].params

    start, end = params_after(zero_weights)
    chex.assert_trees_all_equal(start, end)
    start, end = params_after(None)
    assert not np.allclose(jax.tree_util.tree_leaves(start)[0], jax.tree_util.tree_leaves(end)[0])


def test_greedy_evaluation_matches_a_python_rollout():
    """evaluate() against a plain Python loop over the same env, keys and greedy policy."""
    import gymnax

    config = SimpleQConfig(**TINY, evaluation_num_episodes=3, env_params={"max_steps_in_episode": 60})
    plan = make_plan(config)
    params = jax.jit(plan.init)(jax.random.key(3)).learner["default_policy"].params
    result = jax.jit(plan.evaluate)({"default_policy": params}, jax.random.key(4))

    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=60)
    reset_key, key = jax.random.split(jax.random.key(4))
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, 3), env_params)
    want_ret, want_len, alive = np.zeros(3), np.zeros(3, int), np.ones(3, bool)
    while alive.any():
        key, step_key = jax.random.split(key)
        q = plan.networks["default_policy"].apply(params, obs).q
        action = np.argmax(np.asarray(q), axis=-1)
        obs, state, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, 3), state, jnp.asarray(action), env_params)
        want_ret += np.where(alive, np.asarray(reward), 0.0)
        want_len += alive
        alive &= ~(np.asarray(term) | np.asarray(trunc))
    np.testing.assert_allclose(result.episode_return, want_ret)
    np.testing.assert_array_equal(result.episode_length, want_len)
    assert result.finished.all() and (want_len <= 60).all()
    # Greedy means act() agrees with the argmax of the network.
    np.testing.assert_array_equal(plan.act({"default_policy": params}, obs, "default_policy"),
                                  np.argmax(np.asarray(plan.networks["default_policy"].apply(params, obs).q), -1))


def test_evaluation_vmaps_over_seeds():
    config = SimpleQConfig(**TINY, evaluation_num_episodes=2)
    plan = make_plan(config)
    states = jax.vmap(plan.init)(jax.random.split(jax.random.key(0), 2))
    params = {pid: ls.params for pid, ls in states.learner.items()}
    result = jax.jit(jax.vmap(plan.evaluate))(params, jax.random.split(jax.random.key(1), 2))
    assert result.episode_return.shape == (2, 2)
    np.testing.assert_allclose(result.episode_return, result.episode_length)  # CartPole: +1 per step


def test_the_plan_draws_from_keys_of_the_configs_prng_impl_derived_from_any_key():
    from jaxdqn._platform import PHILOX

    assert SimpleQConfig(**TINY).prng_impl == "philox4x32"  # the default
    philox = plan_key(jax.random.key(0), "philox4x32")
    assert philox.dtype == jax.random.key(0, impl=PHILOX).dtype
    assert plan_key(philox, "philox4x32") is philox
    legacy = plan_key(jax.random.PRNGKey(0), "philox4x32")  # a raw uint32[2] key: the same 64 bits drawn
    np.testing.assert_array_equal(jax.random.key_data(legacy), jax.random.key_data(philox))
    assert not np.array_equal(jax.random.key_data(plan_key(jax.random.key(1), "philox4x32")),
                              jax.random.key_data(philox))
    threefry = jax.random.key(0)
    assert plan_key(threefry, "threefry2x32") is threefry
    np.testing.assert_array_equal(jax.random.key_data(plan_key(jax.random.PRNGKey(0), "threefry2x32")),
                                  jax.random.key_data(threefry))  # a raw threefry key is wrapped, not redrawn
    for impl in ("philox4x32", "threefry2x32"):
        state = jax.eval_shape(make_plan(SimpleQConfig(**TINY, prng_impl=impl)).init, threefry)
        assert state.key.dtype == jax.random.key(0, impl=PHILOX if impl == "philox4x32" else impl).dtype


def count_while_loops(plan):
    state = jax.jit(plan.init)(jax.random.key(0))
    return jax.jit(plan.iteration).lower(state, None).compile().as_text().count(" while(")


def test_an_iteration_compiles_to_straight_line_code_without_rng_loops():
    # On the CPU XLA lowers every threefry call as a rolled while loop (about fifteen per
    # iteration); the plan's Philox keys lower unrolled, and nothing else in a SimpleQ
    # iteration (one store, one replay) needs a loop.
    config = SimpleQConfig(**{**TINY, "rollout_fragment_length": 1})
    assert make_schedule(config).stores == make_schedule(config).replays == 1
    assert count_while_loops(make_plan(config)) == 0
    if jax.default_backend() == "cpu":  # the contrast: threefry's loops are XLA:CPU's (a GPU unrolls them)
        assert count_while_loops(make_plan(config.replace(prng_impl="threefry2x32"))) > 0


# one and several replays per iteration; credit schedules with fewer and more than one per store
@pytest.mark.parametrize("training_intensity", [None, 12.0, 0.77, 13.37])
def test_a_chunk_reports_the_statistics_of_its_last_sgd_step(training_intensity):
    """Inside a chunk only the last replay reports the learner statistics (a peeled last
    iteration, or a ``lax.cond`` per replay in credit schedules); the
    state and the reported statistics must equal those of iterations that compute them at every
    step (``plan.iteration(state)`` called on its own)."""
    config = DQNConfig(**{**TINY, "training_intensity": training_intensity, "n_step": 2})
    plan = make_plan(config)
    assert plan.schedule.iterations_per_chunk > 1
    state = jax.jit(plan.init)(jax.random.key(3))
    fast, report = jax.jit(plan.chunk)(state)
    slow = state
    step = jax.jit(plan.iteration)
    for _ in range(plan.schedule.iterations_per_chunk):
        slow = step(slow)[0]
    stats = slow.metrics.learner["default_policy"]
    assert float(stats.mean_q) != 0.0 and float(stats.grad_gnorm) > 0.0
    for name in ("loss", "mean_q", "min_q", "max_q", "mean_td_error", "cur_lr", "grad_gnorm"):
        # rtol: with grad_clip, XLA may share or not the clip's norm with the statistic's (1 ulp)
        np.testing.assert_allclose(report[f"learner/default_policy/{name}"], getattr(stats, name), rtol=1e-6, err_msg=name)
    assert_equal_but_learner_stats(fast, slow)


def assert_equal_but_learner_stats(a, b):
    """Two ``TrainState``s equal, except their ``metrics.learner`` statistics and the counters at
    the last report (a chunk reports; iterations alone do not): integers, keys and booleans bit
    for bit, floats within 2 ulps (XLA may fuse a gradient with the statistics' gradient norm in
    one program and not in the other, rounding an optimizer moment differently)."""
    unreported = dict(learner=None, episodes_at_report=None, sampled_at_report=None, trained_at_report=None)
    a, b = (s._replace(metrics=s.metrics._replace(**unreported)) for s in (a, b))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        if jnp.issubdtype(x.dtype, jnp.floating):
            np.testing.assert_array_max_ulp(np.asarray(x), np.asarray(y), maxulp=2)
        else:
            np.testing.assert_array_equal(x, y)


@settings(max_examples=25, deadline=None)
@given(st.integers(-2**31, 2**31 - 1), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 7, 40]))
def test_the_portable_philox_draws_what_jaxs_philox_draws(seed, data, size):
    """``_platform.PHILOX`` (its product words from one uint64 product, so that it lowers on any
    device layout) against jax's own ``philox4x32``: keys, splits, fold-ins and draws bit for bit
    (sizes from a few values: each new shape compiles every draw again)."""
    from jaxdqn._platform import PHILOX

    ours, theirs = jax.random.key(seed, impl=PHILOX), jax.random.key(seed, impl="philox4x32")
    data_of = lambda k: np.asarray(jax.random.key_data(k))  # noqa: E731
    np.testing.assert_array_equal(data_of(ours), data_of(theirs))
    draws = [lambda k: data_of(jax.random.split(k, size)), lambda k: data_of(jax.random.fold_in(k, data)),
             lambda k: jax.random.bits(k, (size,)), lambda k: jax.random.bits(k, (2, size), jnp.uint8),
             lambda k: jax.random.uniform(k, (size,)), lambda k: jax.random.randint(k, (size,), 0, 7)]
    for draw in draws:
        np.testing.assert_array_equal(np.asarray(draw(ours)), np.asarray(draw(theirs)))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=16), st.sampled_from([0xD2511F53, 0xCD9E8D57, 2**32 - 1]))
def test_philox_product_words_are_numpys_64_bit_product(values, multiplier):
    """``_mulhilo`` under jit with 64-bit types off (the default): the high and low words of the
    exact product, as numpy's uint64 arithmetic computes them."""
    from jaxdqn._platform import _mulhilo

    a = np.array(values, np.uint32)
    hi, lo = jax.jit(lambda x: _mulhilo(x, np.uint64(multiplier)))(a)
    wide = a.astype(np.uint64) * np.uint64(multiplier)
    assert hi.dtype == lo.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(hi), (wide >> np.uint64(32)).astype(np.uint32))
    np.testing.assert_array_equal(np.asarray(lo), (wide & np.uint64(0xFFFFFFFF)).astype(np.uint32))


def test_the_portable_philox_runs_in_a_multi_device_program():
    """jax's own Philox does not lower under ``pmap`` (jax 0.10); the plan's does."""
    from jaxdqn._platform import PHILOX

    devices = jax.local_devices()
    keys = jax.random.split(jax.random.key(0, impl=PHILOX), len(devices))
    out = jax.pmap(lambda k: jax.random.uniform(jax.random.fold_in(k, jax.lax.axis_index("d")), (3,)),
                   axis_name="d")(keys)
    want = jnp.stack([jax.random.uniform(jax.random.fold_in(k, i), (3,)) for i, k in enumerate(keys)])
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


def test_each_philox_draw_is_computed_once_whatever_uses_it():
    """XLA fuses cheap elementwise producers into each of their consumers; a draw's ten rounds
    used by several ops (comparisons, products, a scan, a reduction) must still be computed once,
    or every program compiles (and runs) the rounds once per consumer. Three Philox evaluations
    here (one split, one float draw, one bits draw): at most 3 x 20 64-bit products (two per
    round) in the compiled program."""
    import re

    from jaxdqn import _platform

    def draws(key):
        k0, k1, k2 = jax.random.split(jax.random.wrap_key_data(key, impl=_platform.PHILOX), 3)
        u = jax.random.uniform(k0, (64,))
        v = jax.random.bits(k1, (64,))
        return (jnp.where(u < 0.3, v, 7), jnp.sum(u * v), jnp.cumsum(u), jnp.max(v >> 3),
                jax.random.key_data(k2) + jax.random.key_data(k1)[0])

    hlo = jax.jit(draws).lower(jnp.zeros(2, jnp.uint32)).compile().as_text()
    products = re.findall(r"u64\[[0-9,]*\](?:\{[0-9,]*\})? multiply\(", hlo)
    assert 0 < len(products) <= 3 * 20, len(products)
