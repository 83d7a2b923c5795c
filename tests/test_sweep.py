"""Sweeps: Tune's grid expansion, grouping trials into programs, and trials traced in one vmapped
program giving the runs that each trial's own program gives."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn import exploration, sweep
from jaxdqn.config import DQNConfig, SimpleQConfig, from_dict
from jaxdqn.trainer import Trainer, apply_overrides

# Small and quick: iterations of 64 env steps, a few SGD steps each.
SMALL = dict(buffer_size=512, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=64,
             hiddens=(16,), model={"fcnet_hiddens": [16]}, train_batch_size=16, total_timesteps=10_000)


def tune_order(grids):
    """Tune 1.x's grid order, written from its generator: the paths sorted, an index per path,
    the first index incremented fastest (with carry)."""
    grids = sorted(grids)
    index = [0] * len(grids)
    while True:
        yield {".".join(path): values[i] for (path, values), i in zip(grids, index)}
        k = 0
        while k < len(index):
            index[k] += 1
            if index[k] < len(grids[k][1]):
                break
            index[k] = 0
            k += 1
        if k == len(index):
            return


@given(st.dictionaries(st.sampled_from(["lr", "gamma", "n_step", "model.fcnet_hiddens", "model.x", "a.b.c"]),
                       st.lists(st.integers(0, 9), min_size=1, max_size=3), max_size=4))
def test_expand_grid_is_tunes_cartesian_product_in_tunes_order(grid):
    doc = {"env": "CartPole-v1", "model": {"fcnet_activation": "relu"}}
    for dotted, values in grid.items():
        *parents, leaf = dotted.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = {"grid_search": values}
    paths = [(tuple(k.split(".")), v) for k, v in grid.items()]
    trials = sweep.expand_grid(doc)
    expected = list(tune_order(paths)) if paths else [{}]
    assert [v for v, _ in trials] == expected
    assert len(trials) == int(np.prod([len(v) for _, v in paths]))
    for variables, resolved in trials:
        for dotted, value in variables.items():
            node = resolved
            for p in dotted.split("."):
                node = node[p]
            assert node == value
        assert resolved["model"]["fcnet_activation"] == "relu"
        assert "grid_search" not in repr(resolved)


def test_expand_grid_refuses_malformed_grids():
    with pytest.raises(ValueError, match=r"lr: a grid_search must be .* non-empty list"):
        sweep.expand_grid({"lr": {"grid_search": []}})
    with pytest.raises(ValueError, match=r"model.x: a grid_search must be"):
        sweep.expand_grid({"model": {"x": {"grid_search": [1], "other": 2}}})


def test_trials_share_a_program_when_they_differ_only_in_traced_keys():
    base = DQNConfig()
    configs = [base.replace(lr=1e-3), base.replace(hiddens=(64,)), base.replace(lr=1e-4, gamma=0.9, seed=3),
               base.replace(hiddens=(64,), lr=3e-4), base.replace(grad_clip=None), base.replace(grad_clip=10.0),
               base.replace(exploration_config={"final_epsilon": 0.1, "epsilon_timesteps": 500})]
    assert sweep.group_trials(configs) == [[0, 2, 5, 6], [1, 3], [4]]
    values = sweep.trial_values([configs[i] for i in (0, 2, 5, 6)])
    assert set(values) == {"lr", "gamma", "grad_clip", "exploration_config.final_epsilon",
                           "exploration_config.epsilon_timesteps"}  # seed goes to the keys
    np.testing.assert_array_equal(values["lr"], np.float32([1e-3, 1e-4, 5e-4, 5e-4]))
    assert values["exploration_config.epsilon_timesteps"].dtype == np.int32
    with pytest.raises(ValueError, match=r"hiddens differs between trials .* separate programs"):
        sweep.trial_values(configs[:2])
    with pytest.raises(ValueError, match="one algorithm"):
        sweep.group_trials([base, SimpleQConfig()])


def test_atari_trials_of_one_game_share_a_program():
    """An ALE batch holds every vmapped run's games (``atari.over_runs``): trials of one game that
    differ only in traced keys share a program; another game is another program."""
    pong, cart = DQNConfig(env="PongNoFrameskip-v4"), DQNConfig()
    configs = [pong, pong.replace(lr=1e-4), DQNConfig(env="BreakoutNoFrameskip-v4"), cart, cart.replace(lr=1e-4)]
    assert sweep.group_trials(configs) == [[0, 1], [2], [3, 4]]


@pytest.mark.parametrize("configs, message", [
    ([DQNConfig(lr_schedule=[[0, 1e-3], [10, 1e-4]]), DQNConfig(lr=1e-3, lr_schedule=[[0, 1e-3], [10, 1e-4]])],
     "lr differs between trials, but lr_schedule is set"),
    ([DQNConfig(prioritized_replay=False), DQNConfig(prioritized_replay=False, prioritized_replay_alpha=0.9)],
     "prioritized_replay_alpha differs .* prioritized_replay is False"),
    ([DQNConfig(explore=False), DQNConfig(explore=False, exploration_config={"final_epsilon": 0.5})],
     "exploration_config.final_epsilon differs .* explore is False"),
])
def test_a_swept_key_without_effect_is_refused(configs, message):
    with pytest.raises(ValueError, match=message):
        sweep.group_trials(configs)


def test_a_trials_values_travel_beside_the_static_config():
    base = DQNConfig()
    hyper = sweep.hyperparams(base, {"lr": 0.5, "exploration_config.final_epsilon": 0.25})
    assert hyper.lr == 0.5 and hyper.final_epsilon == 0.25
    assert hyper._replace(lr=base.lr, final_epsilon=0.02) == base.hyperparams  # nothing else changed
    assert base.lr == 5e-4 and base.exploration_config.final_epsilon == 0.02
    with pytest.raises(ValueError, match="hiddens cannot be traced"):
        sweep.hyperparams(base, {"hiddens": (3,)})


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 5, width=32)), min_size=1, max_size=5),
       st.integers(-5, 60))
def test_piecewise_linear_with_traced_points_equals_the_static_schedule(raw, t):
    points = sorted(raw, key=lambda p: p[0])
    static = float(exploration.piecewise_linear(points, t))
    times = np.array([p[0] for p in points], np.int32)
    values = np.array([p[1] for p in points], np.float32)
    traced = jax.jit(lambda ts, vs: exploration.piecewise_linear(list(zip(ts, vs)), t))(times, values)
    assert float(traced) == pytest.approx(static, rel=1e-6, abs=1e-6)
    assert static == pytest.approx(rllib_piecewise(points, t), rel=1e-5, abs=1e-5)


def rllib_piecewise(points, t):
    """RLlib 1.x's ``PiecewiseSchedule.value`` (linear interpolation) with ``outside_value`` the
    last value, as its ``LearningRateSchedule`` and ``EpsilonGreedy`` build it."""
    for (l_t, left), (r_t, right) in zip(points[:-1], points[1:]):
        if l_t <= t < r_t:
            return left + (t - l_t) / (r_t - l_t) * (right - left)
    return points[-1][1]


# Every traced key changed at once in trial 1 (tau and prioritized keys included): a key that the
# plan ignored, or read from the wrong trial, changes the run.
CHANGES = {"lr": 2e-3, "gamma": 0.9, "adam_epsilon": 1e-4, "grad_clip": 5.0, "tau": 0.5,
           "target_network_update_freq": 96, "exploration_config.initial_epsilon": 0.8,
           "exploration_config.final_epsilon": 0.1, "exploration_config.epsilon_timesteps": 400,
           "prioritized_replay_alpha": 0.4, "prioritized_replay_beta": 0.5, "final_prioritized_replay_beta": 0.9,
           "prioritized_replay_beta_annealing_timesteps": 300, "prioritized_replay_eps": 1e-3}


def test_traced_keys_cover_what_the_test_changes():
    assert set(CHANGES) == sweep.TRACED_KEYS


def test_a_trial_of_a_sweep_is_the_run_of_its_own_config():
    """Trial t of the sweep against a program of the same shape with trial t's values written in
    as constants (``trials`` of equal configs trace nothing): the same keys, the same steps."""
    base = from_dict(SMALL)
    changed = apply_overrides(base, CHANGES)
    sweep_trainer = Trainer(base, num_seeds=2, trials=[{}, CHANGES])
    constant = [Trainer(config, num_seeds=2, trials=[{}, {}]) for config in (base, changed)]
    assert sweep_trainer.runner.trial_values and not constant[1].runner.trial_values
    for _ in range(4):
        swept = sweep_trainer.train()
        for t, trainer in enumerate(constant):
            alone = trainer.train()[t]
            for a, b in zip(swept[t], alone):
                for key in ("episodes_total", "timesteps_total", "info"):
                    if key == "info":
                        for k in ("num_steps_trained", "num_target_updates", "last_target_update_ts"):
                            assert a[key][k] == b[key][k], (t, k)
                    else:
                        assert a[key] == b[key], (t, key)
                assert a["episode_reward_mean"] == pytest.approx(b["episode_reward_mean"], rel=1e-6, nan_ok=True)
    for t, trainer in enumerate(constant):
        for x, y in zip(jax.tree_util.tree_leaves(sweep_trainer.params),
                        jax.tree_util.tree_leaves(trainer.params)):
            np.testing.assert_allclose(np.asarray(x)[t], np.asarray(y)[t], rtol=1e-5, atol=1e-6)
    # The trials really differ (what the test would not see if the changes were ignored).
    assert not np.allclose(jax.tree_util.tree_leaves(sweep_trainer.params)[0][0],
                           jax.tree_util.tree_leaves(sweep_trainer.params)[0][1])
    # Epsilon per trial, from each trial's schedule.
    eps = np.asarray(sweep_trainer._epsilon()).reshape(2, 2)
    sampled = sweep_trainer.timesteps_total
    for t, config in enumerate((base, changed)):
        assert eps[t] == pytest.approx(float(exploration.epsilon(config.exploration_config, sampled)))


def test_sweep_results_are_nested_per_trial_and_a_checkpoint_resumes_them(tmp_path):
    base = from_dict(SMALL)
    trials = [{"lr": 1e-3}, {"lr": 1e-4, "seed": 7}, {"lr": 3e-4}]
    trainer = Trainer(base, num_seeds=2, trials=trials)
    results = trainer.train()
    assert [len(r) for r in results] == [2, 2, 2]
    assert [r[0]["config"] for r in results] == trials
    assert jax.tree_util.tree_leaves(trainer.params)[0].shape[:2] == (3, 2)
    evaluation = trainer.evaluate()
    assert [len(e) for e in evaluation] == [2, 2, 2] and "episode_reward_mean" in evaluation[2][1]["evaluation"]
    path = trainer.save(tmp_path)
    again = Trainer.from_checkpoint(path)
    assert again.trials == trials and again.num_seeds == 2
    a, b = trainer.train(), again.train()
    for x, y in zip(itertools.chain(*a), itertools.chain(*b)):
        assert x["episode_reward_mean"] == y["episode_reward_mean"] or (np.isnan(x["episode_reward_mean"])
                                                                       and np.isnan(y["episode_reward_mean"]))
        assert x["info"]["learner"] == y["info"]["learner"]
    # Trial 1 (seed 7) draws the stream of its own config: seed 7's keys.
    alone = Trainer(apply_overrides(base, trials[1]), num_seeds=2)
    first = [alone.train() for _ in range(2)][-1]
    assert [r["episodes_total"] for r in first] == [r["episodes_total"] for r in a[1]]
    with pytest.raises(ValueError, match=r"trials: checkpoint .*, now None"):
        Trainer(base, num_seeds=2).restore(path)


def test_one_trial_without_seeds_and_bad_trials():
    base = from_dict(SMALL)
    trainer = Trainer(base, trials=[{"gamma": 0.9}, {"gamma": 0.95}])
    results = trainer.train()
    assert isinstance(results, list) and all(isinstance(r, dict) for r in results)
    assert trainer.compute_single_action(np.zeros(4), trial=1) in (0, 1)
    with pytest.raises(ValueError, match=r"trial=2 is invalid"):
        trainer.compute_single_action(np.zeros(4), trial=2)
    with pytest.raises(ValueError, match="trials=\\[\\] is invalid"):
        Trainer(base, trials=[])
    with pytest.raises(ValueError, match="hiddens differs between trials"):
        Trainer(base, trials=[{"hiddens": [8]}, {"hiddens": [16]}])
    with pytest.raises(ValueError, match=r"gamma=2 is invalid"):
        Trainer(base, trials=[{"gamma": 2}])
    with pytest.raises(ValueError, match=r"runs is invalid with num_devices=4"):
        Trainer(base.replace(num_devices=4), trials=[{"lr": 1e-3}, {"lr": 2e-3}, {"lr": 3e-3}])


def test_a_sweep_spreads_its_runs_over_devices_as_seeds_do():
    """2 trials x 2 seeds on 4 (forced CPU) devices: each device trains one run; the runs are
    those of one device."""
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices (tests/conftest.py forces 4 CPU devices)")
    base = from_dict(SMALL)
    trials = [{"lr": 1e-3}, {"lr": 1e-4, "gamma": 0.9}]
    one = Trainer(base, num_seeds=2, trials=trials)
    four = Trainer(base.replace(num_devices=4), num_seeds=2, trials=trials)
    assert four.layout.describe().startswith("4 devices")
    for _ in range(2):
        a, b = one.train(), four.train()
    for x, y in zip(itertools.chain(*a), itertools.chain(*b)):
        assert x["episodes_total"] == y["episodes_total"]
        assert x["info"]["learner"]["default_policy"]["learner_stats"]["mean_q"] == pytest.approx(
            y["info"]["learner"]["default_policy"]["learner_stats"]["mean_q"], rel=1e-5)


def test_a_multi_agent_sweep_keeps_each_policys_overrides():
    """MultiCartPole with two policies, p1 overriding lr: the swept lr reaches p0 only (RLlib: a
    policy's own config wins), and each trial runs as its own program would."""
    base = from_dict({**SMALL, "env": "MultiCartPole-v1", "prioritized_replay": False,
                      "multiagent": {"policies": {"p0": {}, "p1": {"lr": 1e-3}},
                                     "policy_mapping_fn": {"agent_0": "p0", "agent_1": "p1"}}})
    trials = [{"lr": 1e-2, "gamma": 0.9}, {"lr": 1e-4}]
    swept = Trainer(base, trials=trials)
    constant = Trainer(apply_overrides(base, trials[0]), trials=[{}, {}])
    for _ in range(3):
        a, b = swept.train()[0], constant.train()[0]
    assert a["episodes_total"] == b["episodes_total"]
    for pid in ("p0", "p1"):
        for k in ("mean_q", "loss"):
            assert a["info"]["learner"][pid]["learner_stats"][k] == pytest.approx(
                b["info"]["learner"][pid]["learner_stats"][k], rel=1e-5)
    lr = {pid: [float(r["info"]["learner"][pid]["learner_stats"]["cur_lr"]) for r in swept.train()]
          for pid in ("p0", "p1")}
    assert lr["p0"] == pytest.approx([1e-2, 1e-4]) and lr["p1"] == pytest.approx([1e-3, 1e-3])


def test_piecewise_linear_keeps_the_shape_of_t_with_any_number_of_points():
    t = jnp.arange(-2, 12, dtype=jnp.int32)
    for points in ([(5, 0.3)], [(5, 0.3), (5, 0.7)], [(0, 1.0), (10, 0.1)], [(0, 1.0), (4, 0.5), (4, 0.2), (9, 0.0)]):
        out = exploration.piecewise_linear(points, t)
        assert out.shape == t.shape and out.dtype == jnp.float32
        times = np.array([p[0] for p in points], np.int32)
        values = np.array([p[1] for p in points], np.float32)
        traced = jax.jit(lambda ts, vs: exploration.piecewise_linear(list(zip(ts, vs)), t))(times, values)
        np.testing.assert_allclose(traced, out, rtol=1e-6, atol=1e-7)
