"""The execution plan: replay ratio, target syncs, one trace per chunk, independent seeds."""

import fractions
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from unittest import mock

from jaxdqn import DQNConfig, ModelConfig, SimpleQConfig, Trainer, parallel, policy, rollout
from jaxdqn._platform import plan_key
from jaxdqn.plan import make_plan, make_train

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
    for _ in range(3 * plan.schedule.stores_per_chunk // plan.schedule.period):
        state = iteration(state)[0]
        stores += plan.schedule.period
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
    schedule = make_plan(DQNConfig(training_intensity=intensity)).schedule
    ratio = fractions.Fraction(replays, stores)
    assert fractions.Fraction(schedule.replays, schedule.stores) == ratio
    assert schedule.credit == credit
    if credit:  # an iteration is one store; a static one all of its stores
        assert schedule.period == 1
    else:
        assert schedule.period == schedule.stores
        counts = schedule.replay_counts(schedule.stores_per_chunk)  # each store's replays, as soon as paid for
        np.testing.assert_array_equal(np.cumsum(counts), [k * replays // stores for k in range(1, len(counts) + 1)])


def test_a_tiny_or_absurd_training_intensity_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="training_intensity"):
        make_plan(DQNConfig(**{**PLAIN, "training_intensity": 1e-9}))


@pytest.mark.parametrize("starts, total", [(1000, 2000), (1000, 700)])
def test_make_train_counts_the_warm_up_in_total_timesteps_as_the_trainer(starts, total):
    """``total_timesteps`` env steps in all, the ``learning_starts`` warm-up included, rounded up
    to whole chunks: the first chunk that reaches it is the last (the Trainer's stop)."""
    config = DQNConfig(**{**PLAIN, "learning_starts": starts, "total_timesteps": total})
    _, reports = jax.jit(make_train(config))(jax.random.key(0))
    steps = np.asarray(reports["timesteps_total"])
    assert steps[-1] >= total and (len(steps) == 1 or steps[-2] < total), steps


def record_samples(config):
    """``(plan, records)``: the plan with its default policy's buffer sampling as before and
    recording, per replayed batch, the items added so far, the sampled priorities (ones for
    uniform replay), the buffer's minimum priority and the importance weights."""
    from jaxdqn.buffers import segment_tree

    plan = make_plan(config)
    bundle = plan.worker.policies["default_policy"]
    real_sample, records = bundle.buffer.sample, []

    def recording_sample(state, key, batch_size, beta=None):
        sample = real_sample(state, key, batch_size, beta) if config.prioritized_replay else \
            real_sample(state, key, batch_size)
        if config.prioritized_replay:
            storage, p = state.storage, segment_tree.leaf_values(state.trees, capacity=config.buffer_size)[0]
            p_min = segment_tree.minimum(state.trees)
        else:
            storage, p, p_min = state, jnp.ones(config.buffer_size), jnp.float32(1)
        jax.debug.callback(lambda *xs: records.append([np.asarray(x) for x in xs]), storage.num_added,
                           p[sample.indices], p_min, sample.weights)
        return sample

    plan.worker.policies["default_policy"] = bundle._replace(buffer=bundle.buffer._replace(sample=recording_sample))
    return plan, records


def test_prioritized_weights_follow_beta_annealed_over_the_steps_sampled():
    """Every replayed batch's importance weights are ``(p_i / p_min) ** -beta(t)``, with beta
    annealed linearly from ``prioritized_replay_beta`` to ``final_prioritized_replay_beta`` over
    ``prioritized_replay_beta_annealing_timesteps`` env steps ``t`` (RLlib's PiecewiseSchedule),
    recorded from the buffer the plan samples, before and after the annealing's end."""
    config = DQNConfig(**{**TINY, "prioritized_replay_beta": 0.2, "final_prioritized_replay_beta": 1.0,
                          "prioritized_replay_beta_annealing_timesteps": 400})
    plan, records = record_samples(config)
    state = jax.jit(plan.init)(jax.random.key(0))
    chunk = jax.jit(plan.chunk)
    for _ in range(2):
        state, _ = chunk(state)
    jax.effects_barrier()
    steps = np.array([int(r[0]) for r in records])  # one item per env step: items added = steps sampled
    assert steps.min() < 400 < steps.max() and len(set(steps.tolist())) > 10
    for t, p, p_min, weights in records:
        beta = 0.2 + 0.8 * min(int(t) / 400, 1.0)
        np.testing.assert_allclose(weights, (p / p_min) ** -beta, rtol=2e-5)
    assert any(np.ptp(r[3]) > 0.05 for r in records)  # the priorities differ: beta shows in the weights


@pytest.mark.parametrize("starts, prioritized", [(70, False), (64, True)])
def test_the_first_replay_comes_after_the_store_that_reaches_learning_starts(starts, prioritized):
    """RLlib's replay buffer replays nothing while it holds fewer than ``learning_starts``
    items; stores add ``rollout_fragment_length * num_envs = 16`` steps each, so with 70 the
    first replay sees 80 items (after 64: none)."""
    config = DQNConfig(**{**PLAIN, "learning_starts": starts, "prioritized_replay": prioritized})
    assert config.rollout_fragment_length * config.num_envs == 16
    plan, records = record_samples(config)
    state, _ = jax.jit(plan.chunk)(jax.jit(plan.init)(jax.random.key(0)))
    jax.effects_barrier()
    added = [int(r[0]) for r in records]
    assert added[0] == -(-starts // 16) * 16 and added == sorted(added)


def test_target_syncs_when_more_than_freq_steps_were_sampled():
    config = SimpleQConfig(target_network_update_freq=48, **TINY)  # stores of 16 steps
    plan = make_plan(config)
    schedule, init, chunk = plan.schedule, plan.init, plan.chunk
    state = jax.jit(init)(jax.random.key(0))
    sampled = int(state.metrics.num_steps_sampled)
    run = jax.jit(chunk)
    state, report = run(run(state)[0])  # the first chunk, then a whole one
    # RLlib 1.x's UpdateTargetNetwork over the same schedule: a replay syncs when sampled - last > freq
    # (strictly: with steps of 16 and freq 48 every 64 steps, not every 48).
    last, count = 0, 0
    assert schedule.period == 1 and int(report["timesteps_this_iter"]) == schedule.steps_per_chunk
    while sampled < int(report["num_steps_sampled"]):
        sampled += schedule.steps_per_store
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


@pytest.mark.parametrize("training_intensity, n_step, prioritized", [
    (None, 1, False), (12.0, 3, True), (0.77, 1, True), (13.37, 2, False)])
def test_a_chunk_compiles_each_op_once_and_a_fresh_state_runs_the_warm_up_first(training_intensity, n_step,
                                                                                 prioritized):
    """The program of a chunk holds one copy of the env fragment, the store and the replay (each
    traced once while tracing it; ``start`` stores and replays nothing), whatever the schedule (one replay per
    store, a static pattern p / q, a credit); and the first chunk from ``start`` (the warm-up's
    stores as its first rounds) equals the chunk after ``init`` (start + the warm-up stores):
    same state, same report."""
    config = DQNConfig(**{**PLAIN, "training_intensity": training_intensity, "n_step": n_step,
                          "prioritized_replay": prioritized, "learning_starts": 150})
    plan = make_plan(config)
    assert plan.schedule.warmup_stores > 0
    calls = {"run_steps": 0, "add": 0, "replay": 0}
    buffer = plan.worker.buffers["default_policy"]

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    with mock.patch.object(rollout, "run_steps", counted("run_steps", rollout.run_steps)), \
            mock.patch.object(policy, "replay", counted("replay", policy.replay)):
        plan = make_plan(config)
        buffer = plan.worker.buffers["default_policy"]
        plan.worker.buffers["default_policy"] = buffer._replace(add=counted("add", buffer.add))
        state = jax.eval_shape(plan.start, jax.random.key(0))
        assert calls["add"] == calls["replay"] == 0  # (its fragment's shapes are traced, not compiled)
        calls.update(run_steps=0)
        jax.jit(plan.chunk).trace(state)
        assert calls == {"run_steps": 1, "add": 1, "replay": 1}
    fresh, fresh_report = jax.jit(plan.chunk)(jax.jit(plan.start)(jax.random.key(5)))
    warm, warm_report = jax.jit(plan.chunk)(jax.jit(plan.init)(jax.random.key(5)))
    assert int(fresh_report["num_steps_trained"]) > 0
    jax.tree_util.tree_map(np.testing.assert_array_equal, fresh_report, warm_report)
    for x, y in zip(jax.tree_util.tree_leaves(fresh), jax.tree_util.tree_leaves(warm), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(x, y)


def loops_per_run(jaxpr):
    """The while loops of a jaxpr (nested ones included) whose condition is a batch of
    predicates: loops that run once per vmapped run, selecting the whole carry on every trip."""
    found = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            found += eqn.params["cond_jaxpr"].jaxpr.outvars[0].aval.shape != ()
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += loops_per_run(sub)
    return found


@pytest.mark.parametrize("training_intensity", [None, 0.77, 13.37])
def test_vmapped_runs_loop_in_lockstep(training_intensity):
    """Vmapped seeds step in lockstep, so the plan's loops run once for all of them: ``train``
    computes its chunks' counters ahead, a runner's chunk reads them once across the runs' axis.
    (A loop count that differs per run makes JAX run the loop per run, selecting the whole state,
    replay buffers included, on every trip.)"""
    config = DQNConfig(**{**PLAIN, "training_intensity": training_intensity})
    keys = jax.random.split(jax.random.key(0), 3)
    assert loops_per_run(jax.make_jaxpr(jax.vmap(make_train(config)))(keys).jaxpr) == 0
    runner = parallel.make_runner(config, 3)
    states = runner.template()
    chunk = jax.vmap(runner.plan.chunk, axis_name=parallel.RUNS)
    assert loops_per_run(jax.make_jaxpr(chunk)(states).jaxpr) == 0
    unlocked = jax.vmap(make_plan(config).chunk)  # the same chunk, its counters read per run
    assert loops_per_run(jax.make_jaxpr(unlocked)(states).jaxpr) > 0


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


def test_the_plan_draws_from_keys_of_the_configs_prng_impl_derived_from_any_key():
    assert SimpleQConfig(**TINY).prng_impl == "threefry2x32"  # the default: JAX's own
    threefry = jax.random.key(0)
    assert plan_key(threefry, "threefry2x32") is threefry
    np.testing.assert_array_equal(jax.random.key_data(plan_key(jax.random.PRNGKey(0), "threefry2x32")),
                                  jax.random.key_data(threefry))  # a raw threefry key is wrapped, not redrawn
    rbg = plan_key(threefry, "rbg")
    assert rbg.dtype == jax.random.key(0, impl="rbg").dtype and plan_key(rbg, "rbg") is rbg
    assert not np.array_equal(jax.random.key_data(plan_key(jax.random.key(1), "rbg")), jax.random.key_data(rbg))
    for impl in ("rbg", "threefry2x32"):
        state = jax.eval_shape(make_plan(SimpleQConfig(**TINY, prng_impl=impl)).init, threefry)
        assert state.key.dtype == jax.random.key(0, impl=impl).dtype
    with pytest.raises(ValueError, match="^prng_impl='philox4x32' is invalid"):
        SimpleQConfig(prng_impl="philox4x32")


# one and several replays per iteration; credit schedules with fewer and more than one per store
@pytest.mark.parametrize("training_intensity", [None, 12.0, 0.77, 13.37])
def test_a_chunk_reports_the_statistics_of_its_last_sgd_step(training_intensity):
    """Inside a chunk only the last replay reports the learner statistics (a peeled last
    iteration, or a ``lax.cond`` per replay in credit schedules); the
    state and the reported statistics must equal those of iterations that compute them at every
    step (``plan.iteration(state)`` called on its own)."""
    config = DQNConfig(**{**TINY, "training_intensity": training_intensity, "n_step": 2})
    plan = make_plan(config)
    s = plan.schedule
    iterations = s.chunk_stores(s.warmup_steps, s.warmup_steps) // s.period  # the first chunk's
    assert iterations > 1
    state = jax.jit(plan.init)(jax.random.key(3))
    fast, report = jax.jit(plan.chunk)(state)
    slow = state
    step = jax.jit(plan.iteration)
    for _ in range(iterations):
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
    for bit, floats within 8 ulps (XLA may fuse a gradient with the statistics' gradient norm in
    one program and not in the other, rounding an optimizer moment differently)."""
    unreported = dict(learner=None, episodes_at_report=None, sampled_at_report=None, trained_at_report=None)
    a, b = (s._replace(metrics=s.metrics._replace(**unreported)) for s in (a, b))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        if jnp.issubdtype(x.dtype, jnp.floating):
            np.testing.assert_array_max_ulp(np.asarray(x), np.asarray(y), maxulp=8)
        else:
            np.testing.assert_array_equal(x, y)


def rllib_report_points(*, learning_starts, timesteps_per_iteration, steps_per_store, replay_counts, sampled,
                        reports):
    """RLlib 1.x's reporting (plain Python): ``StandardMetricsReporting`` passes a replay op's
    output through ``OncePerTimestepsElapsed(timesteps_per_iteration)``: an output passes when
    ``sampled - last_returned >= timesteps_per_iteration`` (``last_returned`` starts at 0), and the
    replay op outputs nothing before the buffer holds ``learning_starts`` steps. Returns the
    sampled counts of the first ``reports`` results; ``replay_counts(k)``: the replays after the
    ``k``-th store that found the buffer full enough (k from 0)."""
    points, last, k = [], 0, 0
    while len(points) < reports:
        sampled += steps_per_store
        if sampled < learning_starts:
            continue
        for _ in range(replay_counts(k)):
            if sampled - last >= timesteps_per_iteration:
                last = sampled
                points.append(sampled)
        k += 1
    return points


@pytest.mark.parametrize("learning_starts, timesteps_per_iteration, training_intensity", [
    (1000, 256, None), (64, 1000, None), (500, 500, None), (300, 200, 1.5)])
def test_results_come_when_rllibs_once_per_timesteps_elapsed_passes(learning_starts, timesteps_per_iteration,
                                                                     training_intensity):
    """The first result at about max(learning_starts, timesteps_per_iteration) env steps, then one
    per timesteps_per_iteration (RLlib's OncePerTimestepsElapsed; not learning_starts +
    timesteps_per_iteration, at a store with a replay): the Trainer's timesteps_total equal
    RLlib's report points, with one replay per store and with a pattern of period q."""
    config = SimpleQConfig(**{**TINY, "learning_starts": learning_starts, "buffer_size": 4000,
                              "timesteps_per_iteration": timesteps_per_iteration})
    if training_intensity is not None:
        config = DQNConfig(**{**PLAIN, "learning_starts": learning_starts, "buffer_size": 4000,
                              "timesteps_per_iteration": timesteps_per_iteration,
                              "training_intensity": training_intensity})
    trainer = Trainer(config)
    s = trainer.plan.schedule
    ours = [trainer.train()["timesteps_total"] for _ in range(4)]
    pattern = s.replay_counts(s.stores)
    rllib = rllib_report_points(learning_starts=learning_starts, timesteps_per_iteration=timesteps_per_iteration,
                                steps_per_store=s.steps_per_store, replay_counts=lambda k: pattern[k % s.stores],
                                sampled=s.warmup_steps - s.warmup_stores * s.steps_per_store, reports=4)
    assert ours == rllib
    assert ours[0] < learning_starts + timesteps_per_iteration
