"""RLlib 1.x semantics of the keys that change behaviour: each against an expectation of its own
(RLlib's CollectMetrics in plain Python, the random CartPole policy's episode length, formulas)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn import ModelConfig, SimpleQConfig, learner, metrics, plan, results, rollout
from jaxdqn.networks import QNetwork
from jaxdqn.trainer import Trainer
from jaxdqn.types import Sample, Transition
from tests.learner_pieces import optimizer_of, train_step_of

TINY = dict(buffer_size=2000, learning_starts=80, num_envs_per_worker=4, timesteps_per_iteration=64,
            model=ModelConfig(fcnet_hiddens=(16,)), train_batch_size=16, evaluation_num_episodes=3)


class CollectMetrics:
    """RLlib 1.x's ``CollectMetrics`` episode window, in plain Python (rllib/execution/metric_ops.py):
    this iteration's episodes, topped up from the history to ``min_history`` when fewer."""

    def __init__(self, min_history: int) -> None:
        self.min_history, self.history = min_history, []

    def collect(self, episodes: list[float]) -> list[float]:
        window = list(episodes)
        missing = self.min_history - len(window)
        if missing > 0:
            window = self.history[-missing:] + window
        self.history = (self.history + list(episodes))[-self.min_history:]
        return window


@given(st.integers(1, 12), st.lists(st.lists(st.integers(1, 3), min_size=0, max_size=6), min_size=1, max_size=8))
def test_the_smoothing_window_is_rllibs(smoothing, iterations):
    """Each iteration ends episodes in a few fragments of 2 envs; the report summarises RLlib's
    window: all of this iteration's episodes when they are at least N, else the last N, and
    lists them oldest first as RLlib's ``hist_stats``."""
    ring = smoothing + 2 * 3 * 6  # at least one iteration's worth, as metrics.ring_size makes it
    m = metrics.init(ring, {}, ("default_policy",))
    twin, gather, value = CollectMetrics(smoothing), metrics.gatherer(None), 0.0
    for fragments in iterations:
        ended = []
        for n_done in fragments:  # a fragment of 3 steps x 2 envs with n_done episodes ending
            done = np.zeros(6, bool)
            done[:n_done] = True
            returns = np.zeros(6, np.float32)
            returns[:n_done] = value + np.arange(n_done)
            value += n_done
            ended += returns[:n_done].tolist()
            m = metrics.record_episodes(m, rollout.Episodes(done=jnp.asarray(done.reshape(3, 2)),
                                                            episode_return=jnp.asarray(returns.reshape(3, 2)),
                                                            episode_length=jnp.ones((3, 2), jnp.int32)), {})
        report, m = metrics.close_report(m, gather, smoothing)
        window = twin.collect(ended)
        assert int(report["episodes_this_iter"]) == len(ended)
        assert results.window_list(report["hist/episode_reward"]) == window
        assert results.window_list(report["hist/episode_lengths"], integer=True) == [1] * len(window)
        if window:
            assert float(report["episode_reward_mean"]) == pytest.approx(np.mean(window))
            assert float(report["episode_reward_min"]) == min(window)
            assert float(report["episode_reward_max"]) == max(window)
        else:
            assert math.isnan(float(report["episode_reward_mean"]))


def test_this_iter_counts_sum_to_the_totals_from_the_first_result_on():
    """The first result counts the warm-up (learning_starts) too: timesteps_this_iter,
    episodes_this_iter and the trained steps sum to the totals after every train()."""
    trainer = Trainer(SimpleQConfig(**{**TINY, "learning_starts": 200}))
    sampled = episodes = trained = 0
    for _ in range(3):
        r = trainer.train()
        sampled += r["timesteps_this_iter"]
        episodes += r["episodes_this_iter"]
        trained += r["num_env_steps_trained_throughput_per_sec"] * r["time_this_iter_s"]
        assert sampled == r["timesteps_total"] == r["info"]["num_steps_sampled"]
        assert episodes == r["episodes_total"]
        assert trained == pytest.approx(r["info"]["num_steps_trained"], rel=1e-6)
    assert trainer.plan.schedule.warmup_stores > 0


def test_clip_rewards_clips_what_the_learner_sees_not_the_episode_returns():
    config = SimpleQConfig(**TINY, clip_rewards=0.25)
    p = plan.make_plan(config)
    state = jax.jit(p.init)(jax.random.key(0))
    state = jax.jit(p.iteration)(state)[0]
    size = int(state.buffer["default_policy"].size)
    np.testing.assert_array_equal(np.asarray(state.buffer["default_policy"].storage.reward[:size]), 0.25)  # CartPole pays 1
    done = int(state.metrics.episodes.episodes_total)
    assert done > 0  # returns are the env's: one per step
    np.testing.assert_array_equal(state.metrics.episodes.returns[:done], state.metrics.episodes.lengths[:done])


@pytest.mark.parametrize("clip, reward, want", [
    (None, [-3.0, 0.2, 5.0], [-3.0, 0.2, 5.0]), (False, [-3.0, 0.2], [-3.0, 0.2]),
    (True, [-3.0, 0.0, 0.2, 5.0], [-1.0, 0.0, 1.0, 1.0]), (2.0, [-3.0, 0.2, 5.0], [-2.0, 0.2, 2.0]),
    ((-1.0, 0.5), [-3.0, 0.2, 5.0], [-1.0, 0.2, 0.5])])
def test_clip_reward_is_rllibs_rule(clip, reward, want):
    np.testing.assert_allclose(rollout.clip_reward(jnp.asarray(reward), clip), want)


@pytest.mark.parametrize("no_done_at_end", [False, True])
def test_no_done_at_end_bootstraps_at_terminations(no_done_at_end):
    config = SimpleQConfig(**TINY, no_done_at_end=no_done_at_end)
    p = plan.make_plan(config)
    state = jax.jit(p.init)(jax.random.key(1))
    size = int(state.buffer["default_policy"].size)
    assert int(state.metrics.episodes.episodes_total) > 0  # random CartPole episodes terminated
    discounts = set(np.asarray(state.buffer["default_policy"].storage.discount[:size]).tolist())
    assert discounts == ({np.float32(0.99)} if no_done_at_end else {0.0, np.float32(0.99)})


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a_truncation_bootstraps_unless_bootstrap_truncations_is_false(bootstrap):
    """Episodes capped at 6 steps (random CartPole does not fall that soon): each cap bootstraps
    (discount gamma) by default; with ``bootstrap_truncations=False`` it ends the return
    (discount 0) at exactly the episode ends, RLlib 1.x's treatment of a TimeLimit done."""
    config = SimpleQConfig(**TINY, env_params={"max_steps_in_episode": 6}, bootstrap_truncations=bootstrap)
    p = plan.make_plan(config)
    state = jax.jit(p.init)(jax.random.key(3))
    size = int(state.buffer["default_policy"].size)
    ended = int(state.metrics.episodes.episodes_total)
    assert ended >= 4 and size >= 6 * ended
    discounts = np.asarray(state.buffer["default_policy"].storage.discount[:size])
    assert int(np.sum(discounts == 0.0)) == (0 if bootstrap else ended)
    assert set(discounts[discounts > 0].tolist()) == {np.float32(0.99)}


def test_bootstrap_truncations_false_contradicts_no_done_at_end():
    with pytest.raises(ValueError, match=r"bootstrap_truncations=False is invalid: contradicts no_done_at_end"):
        SimpleQConfig(**TINY, no_done_at_end=True, bootstrap_truncations=False)


def test_explore_false_acts_greedily_while_sampling():
    config = SimpleQConfig(**TINY, explore=False)
    p = plan.make_plan(config)
    state = jax.jit(p.init)(jax.random.key(2))  # warm-up only: the params are the initial ones
    size = int(state.buffer["default_policy"].size)
    obs, actions = state.buffer["default_policy"].storage.obs[:size], state.buffer["default_policy"].storage.action[:size]
    q = np.asarray(p.networks["default_policy"].apply(state.learner["default_policy"].params, obs).q)
    np.testing.assert_array_equal(actions, q.argmax(-1))
    explored = jax.jit(plan.make_plan(SimpleQConfig(**TINY)).init)(jax.random.key(2))
    q = np.asarray(p.networks["default_policy"].apply(explored.learner["default_policy"].params, explored.buffer["default_policy"].storage.obs[:size]).q)
    assert (np.asarray(explored.buffer["default_policy"].storage.action[:size]) != q.argmax(-1)).any()  # epsilon ~1


def test_evaluation_explores_when_evaluation_config_says_so():
    """With evaluation_config.explore and epsilon 1 the evaluation is the random policy, whose
    CartPole episodes last about 22 steps on average (sd ~12: 200 episodes give +-2.5 at 3 sd)."""
    config = SimpleQConfig(**{**TINY, "evaluation_num_episodes": 200}, evaluation_config={"explore": True},
                           exploration_config={"initial_epsilon": 1.0, "final_epsilon": 1.0})
    result = Trainer(config).evaluate()["evaluation"]
    assert 19.0 < result["episode_len_mean"] < 25.5, result["episode_len_mean"]


def test_evaluation_interval_adds_evaluation_results_every_n_iterations():
    trainer = Trainer(SimpleQConfig(**TINY, evaluation_interval=2))
    results = [trainer.train() for _ in range(4)]
    assert ["evaluation" in r for r in results] == [False, True, False, True]
    assert results[3]["evaluation"]["episodes_this_iter"] == 3


def test_min_iter_time_s_runs_chunks_until_the_time_has_passed():
    config = SimpleQConfig(**{**TINY, "timesteps_per_iteration": 16}, min_iter_time_s=0.3)
    trainer = Trainer(config)
    trainer.train()  # compiles
    r = trainer.train()
    chunk = trainer.plan.schedule.steps_per_chunk
    assert r["time_this_iter_s"] >= 0.3
    assert r["timesteps_this_iter"] > chunk and r["timesteps_this_iter"] % chunk == 0


def test_mean_td_error_is_q_minus_target_as_rllib_reports_it():
    """A terminal transition with reward -100: the target is -100 and Q is near 0, so RLlib's
    mean_td_error (Q - target) is about +100."""
    config = SimpleQConfig(model=ModelConfig(fcnet_hiddens=(8,)), train_batch_size=4)
    net = QNetwork(2, config.model, config.head)
    opt = optimizer_of(config)
    obs = jnp.eye(4, 3)
    items = Transition(obs=obs, action=jnp.zeros(4, jnp.int32), reward=jnp.full(4, -100.0),
                       discount=jnp.zeros(4), next_obs=obs)
    state = learner.init(net, opt, jax.random.key(0), obs)
    q = np.asarray(net.apply(state.params, obs).q)[:, 0]
    step = train_step_of(config, net, opt)
    _, info = step(state, Sample(items=items, indices=jnp.arange(4), weights=jnp.ones(4)),
                   env_steps=0, key=jax.random.key(1))
    assert float(info.mean_td_error) == pytest.approx(np.mean(q + 100.0), rel=1e-5)
