"""Configs: RLlib defaults, validation messages naming the key, and from_rllib mapping."""

import dataclasses

import pytest

from jaxdqn import DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig
from jaxdqn.rllib import from_rllib


def test_defaults_follow_rllib_1x():
    c = DQNConfig()
    assert (c.gamma, c.lr, c.adam_epsilon, c.grad_clip) == (0.99, 5e-4, 1e-8, 40.0)
    assert (c.train_batch_size, c.buffer_size, c.learning_starts, c.rollout_fragment_length) == (32, 50_000, 1000, 4)
    assert (c.target_network_update_freq, c.timesteps_per_iteration) == (500, 1000)
    assert c.prioritized_replay and c.double_q and c.dueling and c.hiddens == (256,) and c.n_step == 1
    assert (c.prioritized_replay_alpha, c.prioritized_replay_beta, c.prioritized_replay_eps) == (0.6, 0.4, 1e-6)
    assert c.prioritized_replay_beta_annealing_timesteps == 20_000
    assert (c.num_atoms, c.v_min, c.v_max, c.noisy, c.sigma0) == (1, -10.0, 10.0, False, 0.5)
    assert c.exploration_config == ExplorationConfig("EpsilonGreedy", 1.0, 0.02, 10_000)
    assert c.model.fcnet_hiddens == (256, 256) and c.model.fcnet_activation == "tanh"
    s = SimpleQConfig()
    assert not (s.prioritized_replay or s.double_q or s.dueling or s.noisy) and s.n_step == 1
    hash(c), hash(s)  # static configuration is hashable


@pytest.mark.parametrize(
    "changes, key",
    [
        (dict(buffer_size=-1), "buffer_size"),
        (dict(n_step=0), "n_step"),
        (dict(num_atoms=51, v_min=10.0, v_max=-10.0), "v_min"),
        (dict(gamma=1.5), "gamma"),
        (dict(lr=0.0), "lr"),
        (dict(lr_schedule=[[100, 1e-3], [0, 1e-4]]), "lr_schedule"),
        (dict(grad_clip=-1.0), "grad_clip"),
        (dict(tau=0.0), "tau"),
        (dict(prioritized_replay_eps=0.0), "prioritized_replay_eps"),
        (dict(prioritized_replay_alpha=-0.5), "prioritized_replay_alpha"),
        (dict(td_error_loss_fn="l1"), "td_error_loss_fn"),
        (dict(training_intensity=0), "training_intensity"),
        (dict(burn_in=3, replay_sequence_length=3, model=ModelConfig(use_lstm=True)), "burn_in"),
        (dict(replay_sequence_length=8), "replay_sequence_length"),
        (dict(burn_in=2), "burn_in"),  # burn-in without an LSTM
        (dict(rollout_fragment_length=2.5), "rollout_fragment_length"),
        (dict(double_q="yes"), "double_q"),
        (dict(exploration_config=dict(type="SoftQ")), "exploration_config.type"),
        (dict(exploration_config=dict(final_epsilon=2.0)), "exploration_config.final_epsilon"),
        (dict(model=dict(fcnet_activation="sigmoid")), "model.fcnet_activation"),
        (dict(model=dict(fcnet_hiddens=[64, -1])), "model.fcnet_hiddens"),
        (dict(num_devices=0), "num_devices"),
    ],
)
def test_invalid_values_name_the_key(changes, key):
    with pytest.raises(ValueError, match=rf"^{key.replace('.', '[.]')}="):
        DQNConfig(**changes)


def test_rollout_fragment_length_holds_at_least_n_step():
    """RLlib DQN's validate_config: rollout_fragment_length = max(rollout_fragment_length, n_step)."""
    assert DQNConfig(n_step=7, rollout_fragment_length=4).rollout_fragment_length == 7
    assert DQNConfig(n_step=3, rollout_fragment_length=4).rollout_fragment_length == 4
    assert from_rllib({"n_step": 5, "rollout_fragment_length": 1}).rollout_fragment_length == 5


def test_simple_q_refuses_what_rllibs_simple_q_does_not_do():
    assert SimpleQConfig().grad_clip is None and DQNConfig().grad_clip == 40.0
    for key, value in [("grad_clip", 40.0), ("lr_schedule", [[0, 1e-3], [100, 1e-4]]), ("training_intensity", 4.0),
                       ("adam_epsilon", 1e-4), ("tau", 0.5)]:
        with pytest.raises(ValueError, match=f"^{key}=.*SimpleQ requires {key}="):
            SimpleQConfig(**{key: value})
        if key != "grad_clip":  # RLlib's SimpleQ config has grad_clip 40 and never applies it: accepted there
            with pytest.raises(ValueError, match=f"^{key}="):
                from_rllib({key: value}, "simple_q")


def test_new_rllib_keys_are_validated_and_stored():
    c = from_rllib({"clip_rewards": True, "no_done_at_end": True, "explore": False,
                              "evaluation_interval": 3, "evaluation_config": {"explore": True},
                              "metrics_num_episodes_for_smoothing": 20, "min_time_s_per_reporting": 2})
    assert (c.clip_rewards, c.no_done_at_end, c.explore, c.evaluation_interval) == (True, True, False, 3)
    assert c.evaluation_config.explore and c.metrics_smoothing_episodes == 20 and c.min_iter_time_s == 2
    assert DQNConfig(clip_rewards=[-1, 2]).clip_rewards == (-1.0, 2.0)
    for changes, key in [(dict(clip_rewards="sign"), "clip_rewards"), (dict(evaluation_interval=0), "evaluation_interval"),
                         (dict(explore=1), "explore"), (dict(metrics_smoothing_episodes=0), "metrics_smoothing_episodes"),
                         (dict(min_iter_time_s=-1), "min_iter_time_s"), (dict(grad_clip_mode="norm"), "grad_clip_mode")]:
        with pytest.raises(ValueError, match=f"^{key}="):
            DQNConfig(**changes)


def test_simple_q_refuses_dqn_extensions():
    for key, value in [("double_q", True), ("dueling", True), ("prioritized_replay", True), ("n_step", 3),
                       ("num_atoms", 51), ("noisy", True)]:
        with pytest.raises(ValueError, match=f"{key}.*use DQNConfig"):
            SimpleQConfig(**{key: value})


def test_from_rllib_maps_a_users_dict():
    rllib = {
        "env": "CartPole-v1",
        "framework": "torch",
        "num_gpus": 0,
        "gamma": 0.98,
        "lr": 1e-3,
        "lr_schedule": [[0, 1e-3], [10_000, 1e-4]],
        "n_step": 3,
        "num_atoms": 51,
        "v_min": -5.0,
        "v_max": 5.0,
        "hiddens": [128],
        "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu", "vf_share_layers": False},
        "exploration_config": {"type": "EpsilonGreedy", "epsilon_timesteps": 5000, "final_epsilon": 0.05},
        "multiagent": {"policies": {}, "policy_mapping_fn": None},
        "evaluation_config": {"explore": False},
        "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer", "capacity": 20_000},
        "env_config": {"max_steps_in_episode": 200},
        "num_workers": 2,
        "num_envs_per_worker": 4,
    }
    c = from_rllib(rllib)
    assert (c.gamma, c.lr, c.n_step, c.num_atoms, c.v_min, c.hiddens) == (0.98, 1e-3, 3, 51, -5.0, (128,))
    assert c.lr_schedule == ((0, 1e-3), (10_000, 1e-4))
    assert c.model == ModelConfig(fcnet_hiddens=(64, 64), fcnet_activation="relu")
    assert c.exploration_config.epsilon_timesteps == 5000 and c.exploration_config.final_epsilon == 0.05
    assert c.buffer_size == 20_000 and c.prioritized_replay
    assert c.env_params == (("max_steps_in_episode", 200),)
    assert c.num_envs == 8
    s = from_rllib({"replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": 1000}}, "simple_q")
    assert s.buffer_size == 1000 and not s.prioritized_replay


@pytest.mark.parametrize(
    "rllib, match",
    [
        ({"lerning_rate": 1e-3}, "'lerning_rate'"),
        ({"gama": 0.9}, r"'gama'.*gamma"),
        ({"model": {"fcnet_hidden": [64]}}, r"'model.fcnet_hidden'.*model.fcnet_hiddens"),
        ({"model": {"custom_model": "my_net"}}, "custom_model"),
        ({"exploration_config": {"type": "EpsilonGreedy", "temperature": 1.0}}, "exploration_config.temperature"),
        ({"exploration_config": {"type": "ParameterNoise"}}, "exploration_config.type"),
        ({"multiagent": {"policies": {"a": None, "b": None}}}, "multiagent"),
        ({"evaluation_config": {"env_config": {}}}, "evaluation_config.env_config"),
        ({"batch_mode": "complete_episodes"}, "batch_mode"),
        ({"observation_filter": "MeanStdFilter"}, "observation_filter"),
        ({"worker_side_prioritization": True}, "worker_side_prioritization"),
        ({"soft_horizon": True}, "soft_horizon"),
        ({"model": {"lstm_use_prev_action": True}}, "model.lstm_use_prev_action"),
        ({"multiagent": {"policies": {"a": None}, "observation_fn": print}}, "multiagent.observation_fn"),
        ({"clip_rewards": -1.0}, "clip_rewards"),
        ({"replay_buffer_config": {"type": "ReservoirReplayBuffer"}}, "replay_buffer_config.type"),
        ({"n_step": 0}, "n_step"),
        ({"multiagent": {"replay_mode": "lockstep"}}, "lockstep.*prioritized"),
    ],
)
def test_from_rllib_refuses_unknown_or_unsupported_keys(rllib, match):
    with pytest.raises(ValueError, match=match):
        from_rllib(rllib)


def test_configs_are_frozen_and_replace_validates():
    c = DQNConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 1.0
    assert c.replace(lr=1e-3).lr == 1e-3
    with pytest.raises(ValueError, match="^lr="):
        c.replace(lr=-1.0)
