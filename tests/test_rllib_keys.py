"""Every key of RLlib 1.x's DQN / SimpleQ configs is mapped, ignored as RLlib machinery, or refused.

The table below is RLlib 1.x's (execution-plan era) ``COMMON_CONFIG``, DQN's and SimpleQ's
``DEFAULT_CONFIG`` additions, R2D2's replay keys, later 1.x renames, and ``MODEL_DEFAULTS``: each
key with RLlib's default (DQN's where it overrides the common one) and another value. The
expectation is written here, independently of ``jaxdqn.config``'s tables:

* ``map``: the other value changes the config (or is refused naming the key, where it needs
  something else too);
* ``ignore``: the key steers only RLlib's machinery; any value leaves the config unchanged;
* ``refuse``: the default is accepted, the other value raises a ``ValueError`` naming the key.

A key that were accepted with no effect and no listing as machinery would fail here.
"""

import warnings

import pytest

from jaxdqn.config import to_dict
from jaxdqn.rllib import from_rllib
from tests.reference import rllib_defaults


class DefaultCallbacks:  # the name RLlib's default callbacks class has
    pass


class MyCallbacks:
    pass


def hook(*args):
    return args[0]


MAP, IGNORE, REFUSE = "map", "ignore", "refuse"

COMMON = [
    ("num_workers", 0, 3, MAP),
    ("num_envs_per_worker", 1, 4, MAP),
    ("rollout_fragment_length", 4, 8, MAP),
    ("batch_mode", "truncate_episodes", "complete_episodes", REFUSE),
    ("num_gpus", 0, 2, MAP),
    ("train_batch_size", 32, 64, MAP),
    ("model", {}, {"fcnet_hiddens": [8]}, MAP),
    ("optimizer", {}, {"type": "rmsprop"}, MAP),  # ours in RLlib's dict; an unknown key in it is refused
    ("gamma", 0.99, 0.9, MAP),
    ("horizon", None, 100, REFUSE),
    ("soft_horizon", False, True, REFUSE),
    ("no_done_at_end", False, True, MAP),
    ("env_config", {}, {"max_steps_in_episode": 50}, MAP),
    ("env", "CartPole-v1", "Acrobot-v1", MAP),
    ("normalize_actions", False, True, IGNORE),
    ("clip_rewards", None, True, MAP),
    ("clip_actions", True, False, IGNORE),
    ("preprocessor_pref", "deepmind", "rllib", IGNORE),
    ("lr", 5e-4, 1e-3, MAP),
    ("monitor", False, True, REFUSE),
    ("log_level", "WARN", "DEBUG", IGNORE),
    ("callbacks", DefaultCallbacks, MyCallbacks, REFUSE),
    ("ignore_worker_failures", False, True, REFUSE),
    ("log_sys_usage", True, False, IGNORE),
    ("fake_sampler", False, True, REFUSE),
    ("framework", "tf", "tf2", MAP),  # tf clips each gradient tensor (torch: tested below)
    ("eager_tracing", False, True, IGNORE),
    ("explore", True, False, MAP),
    ("exploration_config", {"type": "EpsilonGreedy"}, {"final_epsilon": 0.1}, MAP),
    ("evaluation_interval", None, 5, MAP),
    ("evaluation_num_episodes", 10, 5, MAP),
    ("in_evaluation", False, True, REFUSE),
    ("evaluation_config", {"explore": False}, {"explore": True}, MAP),
    ("evaluation_num_workers", 0, 2, IGNORE),
    ("custom_eval_function", None, hook, REFUSE),
    ("sample_async", False, True, REFUSE),
    ("_use_trajectory_view_api", True, False, IGNORE),
    ("observation_filter", "NoFilter", "MeanStdFilter", REFUSE),
    ("synchronize_filters", True, False, IGNORE),
    ("tf_session_args", {}, {"intra_op_parallelism_threads": 8}, IGNORE),
    ("local_tf_session_args", {}, {"inter_op_parallelism_threads": 8}, IGNORE),
    ("compress_observations", False, True, IGNORE),
    ("collect_metrics_timeout", 180, 10, IGNORE),
    ("metrics_smoothing_episodes", 100, 10, MAP),
    ("remote_worker_envs", False, True, IGNORE),
    ("remote_env_batch_wait_ms", 0, 5, IGNORE),
    ("min_iter_time_s", 0, 5, MAP),
    ("timesteps_per_iteration", 1000, 500, MAP),
    ("seed", None, 3, MAP),
    ("extra_python_environs_for_driver", {}, {"OMP_NUM_THREADS": "1"}, IGNORE),
    ("extra_python_environs_for_worker", {}, {"OMP_NUM_THREADS": "1"}, IGNORE),
    ("num_cpus_per_worker", 1, 2, IGNORE),
    ("num_gpus_per_worker", 0, 1, IGNORE),
    ("custom_resources_per_worker", {}, {"tpu": 1}, IGNORE),
    ("num_cpus_for_driver", 1, 2, IGNORE),
    ("memory", 0, 2**30, IGNORE),
    ("object_store_memory", 0, 2**30, IGNORE),
    ("memory_per_worker", 0, 2**30, IGNORE),
    ("object_store_memory_per_worker", 0, 2**30, IGNORE),
    ("input", "sampler", "/tmp/*.json", REFUSE),
    ("input_evaluation", ["is", "wis"], [], IGNORE),
    ("postprocess_inputs", False, True, IGNORE),
    ("shuffle_buffer_size", 0, 10, IGNORE),
    ("output", None, "logdir", REFUSE),
    ("output_compress_columns", ["obs", "new_obs"], [], IGNORE),
    ("output_max_file_size", 64 * 1024 * 1024, 1024, IGNORE),
    ("multiagent", {"policies": {}, "policy_mapping_fn": None, "policies_to_train": None, "observation_fn": None,
                    "replay_mode": "independent"}, {"policies": {"p0": {}}}, MAP),
    ("logger_config", None, {"type": "x"}, IGNORE),
    ("replay_sequence_length", 1, 4, MAP),  # refused naming the key without model.use_lstm
    ("_fake_gpus", False, True, IGNORE),
    ("eager_max_retraces", 20, 5, IGNORE),
    ("placement_strategy", "PACK", "SPREAD", IGNORE),
    ("recreate_failed_workers", False, True, MAP),
    ("record_env", False, True, REFUSE),
    ("render_env", False, True, REFUSE),
    ("evaluation_parallel_to_training", False, True, IGNORE),
    ("create_env_on_driver", False, True, IGNORE),
    ("simple_optimizer", False, True, IGNORE),
    ("_disable_execution_plan_api", False, True, IGNORE),
    # RLlib 1.6-1.13's later common keys
    ("observation_space", None, "Box(4)", REFUSE),
    ("action_space", None, "Discrete(2)", REFUSE),
    ("env_task_fn", None, hook, REFUSE),
    ("evaluation_duration", 10, 5, MAP),
    ("evaluation_duration_unit", "episodes", "timesteps", REFUSE),
    ("always_attach_evaluation_results", False, True, REFUSE),
    ("min_train_timesteps_per_reporting", None, 100, REFUSE),
    ("_tf_policy_handles_more_than_one_loss", False, True, IGNORE),
    ("_disable_preprocessor_api", False, True, IGNORE),
    ("_disable_action_flattening", False, True, IGNORE),
    ("metrics_episode_collection_timeout_s", 180, 10, IGNORE),
    ("evaluation_sample_timeout_s", 180.0, 10.0, IGNORE),
    ("disable_env_checking", False, True, IGNORE),
    ("restart_failed_sub_environments", False, True, IGNORE),
    ("num_consecutive_worker_failures_tolerance", 100, 3, MAP),
    ("sample_collector", "SimpleListCollector", "MyCollector", IGNORE),
    ("input_config", {}, {"a": 1}, IGNORE),
    ("actions_in_input_normalized", False, True, IGNORE),
    ("off_policy_estimation_methods", {}, {"is": {}}, IGNORE),
    ("output_config", {}, {"a": 1}, IGNORE),
    ("keep_per_episode_custom_metrics", False, True, IGNORE),
]

DQN_AND_SIMPLE_Q = [
    ("num_atoms", 1, 51, MAP),
    ("v_min", -10.0, -5.0, MAP),
    ("v_max", 10.0, 5.0, MAP),
    ("noisy", False, True, MAP),
    ("sigma0", 0.5, 0.1, MAP),
    ("dueling", True, False, MAP),
    ("hiddens", [256], [64], MAP),
    ("double_q", True, False, MAP),
    ("n_step", 1, 3, MAP),
    ("target_network_update_freq", 500, 100, MAP),
    ("buffer_size", 50_000, 1000, MAP),
    ("prioritized_replay", True, False, MAP),
    ("prioritized_replay_alpha", 0.6, 0.5, MAP),
    ("prioritized_replay_beta", 0.4, 0.5, MAP),
    ("final_prioritized_replay_beta", 0.4, 1.0, MAP),
    ("prioritized_replay_beta_annealing_timesteps", 20_000, 1000, MAP),
    ("prioritized_replay_eps", 1e-6, 1e-5, MAP),
    ("before_learn_on_batch", None, hook, REFUSE),
    ("training_intensity", None, 2.0, MAP),
    ("lr_schedule", None, [[0, 1e-3], [100, 1e-4]], MAP),
    ("adam_epsilon", 1e-8, 1e-4, MAP),
    ("grad_clip", 40, 10, MAP),
    ("learning_starts", 1000, 500, MAP),
    ("worker_side_prioritization", False, True, REFUSE),
    ("tau", 1.0, 0.5, MAP),
    ("store_buffer_in_checkpoints", False, True, IGNORE),
    ("replay_buffer_config", {"capacity": 50_000}, {"capacity": 1000}, MAP),
    # R2D2's replay keys
    ("burn_in", 0, 2, MAP),  # refused naming the key without model.use_lstm
    ("zero_init_states", True, False, MAP),
    # later 1.x names of the same settings
    ("metrics_num_episodes_for_smoothing", 100, 10, MAP),
    ("min_time_s_per_reporting", 0, 5, MAP),
    ("min_sample_timesteps_per_reporting", 1000, 500, MAP),
    # R2D2's and 1.13's
    ("use_h_function", False, True, MAP),
    ("h_function_epsilon", 1e-3, 1e-2, MAP),
    ("categorical_distribution_temperature", 1.0, 0.5, REFUSE),
]

MODEL = [
    ("fcnet_hiddens", [256, 256], [64], MAP),
    ("fcnet_activation", "tanh", "relu", MAP),
    ("conv_filters", None, [[16, 3, 1]], MAP),
    ("conv_activation", "relu", "elu", MAP),
    ("free_log_std", False, True, IGNORE),
    ("no_final_linear", False, True, REFUSE),
    ("vf_share_layers", True, False, IGNORE),
    ("use_lstm", False, True, MAP),
    ("max_seq_len", 20, 10, MAP),
    ("lstm_cell_size", 256, 64, MAP),
    ("lstm_use_prev_action_reward", False, True, REFUSE),
    ("lstm_use_prev_action", False, True, REFUSE),
    ("lstm_use_prev_reward", False, True, REFUSE),
    ("_time_major", False, True, IGNORE),
    ("use_attention", False, True, REFUSE),
    ("post_fcnet_hiddens", [], [64], REFUSE),
    ("framestack", True, False, IGNORE),
    ("dim", 84, 42, IGNORE),
    ("grayscale", False, True, IGNORE),
    ("zero_mean", True, False, IGNORE),
    ("custom_model", None, "my_model", REFUSE),
    ("custom_model_config", {}, {"a": 1}, REFUSE),
    ("custom_action_dist", None, "my_dist", REFUSE),
    ("custom_preprocessor", None, "my_preprocessor", REFUSE),
    ("post_fcnet_activation", "relu", "tanh", IGNORE),  # no post layers: post_fcnet_hiddens is []
    ("attention_dim", 64, 32, IGNORE),  # attention nets are refused (use_attention)
    ("attention_num_transformer_units", 1, 2, IGNORE),
    ("attention_num_heads", 1, 2, IGNORE),
    ("attention_head_dim", 32, 16, IGNORE),
    ("attention_memory_inference", 50, 10, IGNORE),
    ("attention_memory_training", 50, 10, IGNORE),
    ("attention_position_wise_mlp_dim", 32, 16, IGNORE),
    ("attention_init_gru_gate_bias", 2.0, 1.0, IGNORE),
    ("attention_use_n_prev_actions", 0, 1, IGNORE),
    ("attention_use_n_prev_rewards", 0, 1, IGNORE),
    ("num_framestacks", "auto", 4, REFUSE),  # a non-Atari env's observations are not stacked
]

CASES = [(key, d, o, kind) for key, d, o, kind in COMMON + DQN_AND_SIMPLE_Q] + [
    (f"model.{key}", {"model": {key: d}}, {"model": {key: o}}, kind) for key, d, o, kind in MODEL]


def as_config(key, value):
    return value if key.startswith("model.") else {key: value}


# Where each mapped key's other value lands: (our dotted field, its value), written from RLlib's
# meaning of the key; None: the value is refused naming the key (it needs another key too).
TARGETS = {
    "num_workers": ("num_workers", 3), "num_envs_per_worker": ("num_envs_per_worker", 4),
    "rollout_fragment_length": ("rollout_fragment_length", 8), "num_gpus": ("num_devices", 2),
    "train_batch_size": ("train_batch_size", 64), "model": ("model.fcnet_hiddens", [8]),
    "optimizer": ("optimizer.type", "rmsprop"), "gamma": ("gamma", 0.9), "no_done_at_end": ("no_done_at_end", True),
    "env_config": ("env_params", {"max_steps_in_episode": 50}), "env": ("env", "Acrobot-v1"),
    "clip_rewards": ("clip_rewards", True), "lr": ("lr", 1e-3), "explore": ("explore", False),
    "exploration_config": ("exploration_config.final_epsilon", 0.1), "evaluation_interval": ("evaluation_interval", 5),
    "evaluation_num_episodes": ("evaluation_num_episodes", 5), "evaluation_config": ("evaluation_config.explore", True),
    "metrics_smoothing_episodes": ("metrics_smoothing_episodes", 10), "min_iter_time_s": ("min_iter_time_s", 5),
    "timesteps_per_iteration": ("timesteps_per_iteration", 500), "seed": ("seed", 3),
    "evaluation_duration": ("evaluation_num_episodes", 5), "use_h_function": ("use_h_function", True),
    "h_function_epsilon": ("h_function_epsilon", 1e-2),
    "recreate_failed_workers": ("recreate_failed_workers", True),
    "num_consecutive_worker_failures_tolerance": ("num_consecutive_worker_failures_tolerance", 3),
    "multiagent": ("multiagent.policies", {"p0": {}}), "framework": ("grad_clip_mode", "per_tensor"), "replay_sequence_length": None,
    "num_atoms": ("num_atoms", 51), "v_min": ("v_min", -5.0), "v_max": ("v_max", 5.0), "noisy": ("noisy", True),
    "sigma0": ("sigma0", 0.1), "dueling": ("dueling", False), "hiddens": ("hiddens", [64]),
    "double_q": ("double_q", False), "n_step": ("n_step", 3),
    "target_network_update_freq": ("target_network_update_freq", 100), "buffer_size": ("buffer_size", 1000),
    "prioritized_replay": ("prioritized_replay", False), "prioritized_replay_alpha": ("prioritized_replay_alpha", 0.5),
    "prioritized_replay_beta": ("prioritized_replay_beta", 0.5),
    "final_prioritized_replay_beta": ("final_prioritized_replay_beta", 1.0),
    "prioritized_replay_beta_annealing_timesteps": ("prioritized_replay_beta_annealing_timesteps", 1000),
    "prioritized_replay_eps": ("prioritized_replay_eps", 1e-5), "training_intensity": ("training_intensity", 2.0),
    "lr_schedule": ("lr_schedule", [[0, 1e-3], [100, 1e-4]]), "adam_epsilon": ("adam_epsilon", 1e-4),
    "grad_clip": ("grad_clip", 10), "learning_starts": ("learning_starts", 500), "tau": ("tau", 0.5),
    "replay_buffer_config": ("buffer_size", 1000), "burn_in": None, "zero_init_states": ("zero_init_states", False),
    "metrics_num_episodes_for_smoothing": ("metrics_smoothing_episodes", 10),
    "min_time_s_per_reporting": ("min_iter_time_s", 5),
    "min_sample_timesteps_per_reporting": ("timesteps_per_iteration", 500),
    "model.fcnet_hiddens": ("model.fcnet_hiddens", [64]), "model.fcnet_activation": ("model.fcnet_activation", "relu"),
    "model.conv_filters": ("model.conv_filters", [[16, 3, 1]]),
    "model.conv_activation": ("model.conv_activation", "elu"), "model.use_lstm": ("model.use_lstm", True),
    "model.max_seq_len": ("model.max_seq_len", 10), "model.lstm_cell_size": ("model.lstm_cell_size", 64),
}


def field(config, dotted):
    value = to_dict(config)
    for part in dotted.split("."):
        value = None if value is None else value[part]  # a section the base config does not have
    return value


@pytest.mark.parametrize("key, default, other, kind", CASES, ids=[c[0] for c in CASES])
def test_every_rllib_1x_key_is_mapped_ignored_or_refused(key, default, other, kind):
    base = from_rllib({})
    from_rllib(as_config(key, default))  # RLlib's default is always accepted
    name = key.split(".")[-1]
    if kind == REFUSE:
        with pytest.raises(ValueError, match=name):
            from_rllib(as_config(key, other))
    elif kind == IGNORE:
        assert from_rllib(as_config(key, other)) == base
    elif TARGETS[key] is None:  # mapped, but this value needs another key too
        with pytest.raises(ValueError, match=name):
            from_rllib(as_config(key, other))
    else:
        target, value = TARGETS[key]
        changed = from_rllib(as_config(key, other))
        assert field(changed, target) == value and field(base, target) != value
        differing = {k for k in to_dict(base) if to_dict(base)[k] != to_dict(changed)[k]}
        assert differing == {target.split(".")[0]}, differing  # nothing else moved


def test_the_table_covers_every_key_once():
    keys = [c[0] for c in CASES]
    assert len(keys) == len(set(keys))
    assert set(TARGETS) == {c[0] for c in CASES if c[3] == MAP}


def test_evaluation_workers_without_an_interval_warn_as_rllib_does():
    """RLlib 1.x's validate_config: evaluation workers without ``evaluation_interval`` make
    ``train()`` evaluate nothing, with a warning; with an interval, no warning."""
    with pytest.warns(UserWarning, match=r"evaluation_num_workers=2 without an evaluation_interval.*evaluate\(\)"):
        config = from_rllib({"evaluation_num_workers": 2})
    assert config.evaluation_interval is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_rllib({"evaluation_num_workers": 2, "evaluation_interval": 3}).evaluation_interval == 3
        from_rllib({"evaluation_num_workers": 0})


def test_framework_selects_rllibs_gradient_clipping_unless_grad_clip_mode_is_given():
    """RLlib 1.x's tf policies clip each gradient tensor by ``grad_clip`` (``minimize_and_clip``),
    its torch policies the global norm (``apply_grad_clipping``): the bundled RLlib YAMLs say
    ``framework: tf``."""
    import pathlib

    from jaxdqn.cli import documents

    assert from_rllib({"framework": "tf"}).grad_clip_mode == "per_tensor"
    assert from_rllib({"framework": "torch"}).grad_clip_mode == "global_norm"
    assert from_rllib({}).grad_clip_mode == "global_norm"
    assert from_rllib({"framework": "tf", "grad_clip_mode": "global_norm"}).grad_clip_mode == "global_norm"
    with pytest.raises(ValueError, match=r"framework='mxnet'.*supported: \['tf', 'tf2', 'tfe', 'torch'\]"):
        from_rllib({"framework": "mxnet"})
    for path in sorted((pathlib.Path(__file__).parent / "data" / "rllib").glob("*.yaml")):
        doc = documents.read_yaml(str(path))
        _, variants, _, _, _ = documents.document_variants(doc, path.name)
        assert all(config.get("grad_clip_mode") == "per_tensor" for _, config in variants), path.name


def test_preprocessor_pref_other_than_deepmind_is_refused_for_atari():
    """RLlib wraps an Atari env with wrap_deepmind only under ``preprocessor_pref: deepmind`` (its
    default); jaxdqn has no other Atari preprocessing, so another choice is refused there and
    ignored elsewhere (RLlib's generic preprocessors leave a gymnax env's vectors alone)."""
    with pytest.raises(ValueError, match="preprocessor_pref='rllib'.*supported: 'deepmind'"):
        from_rllib({"env": "PongNoFrameskip-v4", "preprocessor_pref": "rllib"})
    assert from_rllib({"env": "PongNoFrameskip-v4", "preprocessor_pref": "deepmind"}).env == "PongNoFrameskip-v4"
    assert from_rllib({"env": "CartPole-v1", "preprocessor_pref": None}) == from_rllib({"env": "CartPole-v1"})


@pytest.mark.parametrize("version", rllib_defaults.VERSIONS)
@pytest.mark.parametrize("algo", ["simple_q", "dqn", "r2d2"])
def test_rllibs_own_default_configs_are_accepted_with_rllibs_settings(version, algo):
    """RLlib 1.6, 1.10 and 1.13's whole DEFAULT_CONFIG of SimpleQ, DQN and R2D2 (COMMON_CONFIG and
    MODEL_DEFAULTS included, deprecated keys at DEPRECATED_VALUE, later names next to the 1.x
    ones) goes through ``from_rllib``, and the settings RLlib runs with come out: in every
    release one report per 1000 sampled steps, 1 s at least, 10 evaluation episodes, a 100
    episode window, learning from 1000 steps, 50k (R2D2: 100k) steps of replay."""
    config = rllib_defaults.default_config(algo, version)
    config["env"] = "CartPole-v1"  # RLlib's default env is None: a run names one
    if algo == "r2d2":
        config["model"]["use_lstm"] = True  # R2D2 trains recurrent models (complete_episodes, sequences)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = from_rllib(config, "simple_q" if algo == "simple_q" else "dqn")
    assert (ours.timesteps_per_iteration, ours.min_iter_time_s) == (1000, 1)
    assert (ours.evaluation_num_episodes, ours.metrics_smoothing_episodes) == (10, 100)
    assert ours.learning_starts == 1000 and ours.buffer_size == (100_000 if algo == "r2d2" else 50_000)
    assert (ours.rollout_fragment_length, ours.num_workers) == (4, 2 if algo == "r2d2" else 0)
    assert ours.prioritized_replay is (algo == "dqn" or (algo == "r2d2" and version != "1.13"))
    assert ours.grad_clip == (None if algo == "simple_q" else 40)  # RLlib's SimpleQ policy never clips
    assert ours.grad_clip_mode == "per_tensor"  # framework: tf
    assert ours.exploration_config.final_epsilon == 0.02 and ours.evaluation_config.explore is False
    if algo == "r2d2":
        assert (ours.gamma, ours.lr, ours.adam_epsilon, ours.target_network_update_freq) == (0.997, 1e-4, 1e-3, 2500)
        assert ours.use_h_function and ours.h_function_epsilon == 1e-3
        assert ours.sequence_length == 20  # replay_sequence_length -1: max_seq_len + burn_in
    else:
        assert (ours.gamma, ours.lr, ours.train_batch_size, ours.use_h_function) == (0.99, 5e-4, 32, False)


def test_a_1x_name_that_is_set_wins_over_its_later_name_and_deprecated_placeholders_are_left_out():
    """RLlib 1.10-1.13's validate_config: an old key set by the user is copied over its new
    place; at DEPRECATED_VALUE (-1) or, for the reporting minimums, at 0 it stays unset. Two
    later names that disagree are refused, naming both."""
    base = from_rllib({})
    assert from_rllib({"buffer_size": 10_000, "replay_buffer_config": {"capacity": 20_000}}).buffer_size == 10_000
    assert from_rllib({"buffer_size": -1, "replay_buffer_config": {"capacity": 20_000}}).buffer_size == 20_000
    assert from_rllib({"timesteps_per_iteration": 0,
                       "min_sample_timesteps_per_reporting": 500}).timesteps_per_iteration == 500
    assert from_rllib({"timesteps_per_iteration": 0}).timesteps_per_iteration == 0  # RLlib: no minimum
    assert from_rllib({"min_sample_timesteps_per_reporting": None}).timesteps_per_iteration == 0
    deprecated = {k: -1 for k in ("monitor", "simple_optimizer", "evaluation_num_episodes", "learning_starts",
                                  "metrics_smoothing_episodes", "min_iter_time_s", "prioritized_replay_alpha")}
    assert from_rllib(deprecated) == base
    with pytest.raises(ValueError, match=r"min_sample_timesteps_per_reporting=500 and "
                                         r"min_sample_timesteps_per_iteration=600 set timesteps_per_iteration"):
        from_rllib({"min_sample_timesteps_per_reporting": 500, "min_sample_timesteps_per_iteration": 600})
    with pytest.raises(ValueError, match="evaluation_duration='auto'"):
        from_rllib({"evaluation_duration": "auto"})


def test_simple_q_accepts_grad_clip_and_ignores_it_as_rllibs_simple_q_policy_does():
    for clip in (40, 10.0, None):
        assert from_rllib({"grad_clip": clip}, "simple_q").grad_clip is None
    assert from_rllib({"grad_clip": 10.0}, "dqn").grad_clip == 10.0


def test_complete_episodes_and_sequence_storage_only_with_a_recurrent_model():
    """R2D2's ``batch_mode: complete_episodes`` and ``storage_unit: sequences``: accepted with
    ``model.use_lstm`` (the sequences never span episodes: ``first`` flags, docs/rllib.md), refused
    for a feed-forward model, where they would change what a store holds."""
    lstm = {"model": {"use_lstm": True}}
    assert from_rllib({**lstm, "batch_mode": "complete_episodes"}) == from_rllib(lstm)
    assert from_rllib({**lstm, "replay_buffer_config": {"storage_unit": "sequences"}}) == from_rllib(lstm)
    with pytest.raises(ValueError, match="batch_mode='complete_episodes'"):
        from_rllib({"batch_mode": "complete_episodes"})
    with pytest.raises(ValueError, match="storage_unit='sequences'"):
        from_rllib({"replay_buffer_config": {"storage_unit": "sequences"}})
    with pytest.raises(ValueError, match="storage_unit='episodes'"):
        from_rllib({**lstm, "replay_buffer_config": {"storage_unit": "episodes"}})


@pytest.mark.parametrize("model, stack", [
    ({}, 4), ({"framestack": True, "num_framestacks": 2}, 4), ({"framestack": False}, 4),
    ({"framestack": False, "num_framestacks": 2}, 2), ({"framestack": False, "num_framestacks": 0}, 1)])
def test_atari_frame_stacks_follow_rllibs_framestack_and_num_framestacks(model, stack):
    """RLlib 1.x: the legacy ``framestack=True`` (the default) stacks 4 frames in wrap_deepmind;
    with ``framestack=False`` ``num_framestacks`` counts them ("auto": 4 for Atari)."""
    config = from_rllib({"env": "PongNoFrameskip-v4", "model": model})
    assert dict(config.env_params).get("stack_num", 4) == stack
