"""RLlib's own default configs of DQN, SimpleQ and R2D2, written out from RLlib's sources.

``rllib/agents/trainer.py`` (``COMMON_CONFIG``), ``rllib/models/catalog.py`` (``MODEL_DEFAULTS``)
and ``rllib/agents/dqn/{simple_q,dqn,r2d2}.py`` (``DEFAULT_CONFIG``) of three release lines: 1.6
(the execution-plan era's first keys of the new names), 1.10-1.12 (``evaluation_duration``,
``*_per_reporting``, ``DEPRECATED_VALUE`` placeholders) and 1.13 (the replay-buffer API:
``replay_buffer_config`` holds the replay keys, the top-level ones are ``DEPRECATED_VALUE``).
Transcribed from those files as stored in ray-project/ray's history: COMMON_CONFIG of a 1.11-1.12
trainer.py (the 1.10 line's keys), MODEL_DEFAULTS of catalog.py, DQN's dict of a 1.10-1.12 dqn.py,
1.13's simple_q.py and r2d2.py; the 1.6 dicts, 1.10's SimpleQ and R2D2 and 1.13's additions to
COMMON_CONFIG and DQN are written from those releases' keys as remembered (not read here), so a key
missing from them, or one that came a release later, is possible.
Values that are Python objects in RLlib are written as ``from_rllib`` receives them from a YAML
file or a dict a user copied: a class by its name (``DefaultCallbacks``), ``DEPRECATED_VALUE``
as RLlib's ``-1``. Each config is built the way RLlib builds it: ``COMMON_CONFIG`` updated by the
algorithm's dict, nested dicts merged key by key (``Trainer.merge_trainer_configs``).
"""

from __future__ import annotations

import copy

DEPRECATED_VALUE = -1  # ray.rllib.utils.deprecation.DEPRECATED_VALUE


class DefaultCallbacks:  # ray.rllib.agents.callbacks.DefaultCallbacks, by name
    pass


class SimpleListCollector:  # ray.rllib.evaluation.collectors.simple_list_collector, by name
    pass


TF_SESSION_ARGS = {"intra_op_parallelism_threads": 2, "inter_op_parallelism_threads": 2,
                   "gpu_options": {"allow_growth": True}, "log_device_placement": False,
                   "device_count": {"CPU": 1}, "allow_soft_placement": True}
LOCAL_TF_SESSION_ARGS = {"intra_op_parallelism_threads": 8, "inter_op_parallelism_threads": 8}

MODEL_DEFAULTS = {
    "1.6": {
        "fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "conv_filters": None, "conv_activation": "relu",
        "post_fcnet_hiddens": [], "post_fcnet_activation": "relu", "free_log_std": False, "no_final_linear": False,
        "vf_share_layers": True, "use_lstm": False, "max_seq_len": 20, "lstm_cell_size": 256,
        "lstm_use_prev_action": False, "lstm_use_prev_reward": False, "_time_major": False,
        "use_attention": False, "attention_num_transformer_units": 1, "attention_dim": 64, "attention_num_heads": 1,
        "attention_head_dim": 32, "attention_memory_inference": 50, "attention_memory_training": 50,
        "attention_position_wise_mlp_dim": 32, "attention_init_gru_gate_bias": 2.0,
        "attention_use_n_prev_actions": 0, "attention_use_n_prev_rewards": 0, "num_framestacks": "auto",
        "dim": 84, "grayscale": False, "zero_mean": True, "custom_model": None, "custom_model_config": {},
        "custom_action_dist": None, "custom_preprocessor": None,
        "lstm_use_prev_action_reward": DEPRECATED_VALUE, "framestack": True,
    },
}
MODEL_DEFAULTS["1.10"] = {**MODEL_DEFAULTS["1.6"], "_use_default_native_models": False}
MODEL_DEFAULTS["1.13"] = {**MODEL_DEFAULTS["1.10"], "_disable_preprocessor_api": False,
                          "_disable_action_flattening": False}

_COMMON_1_6 = {
    "num_workers": 2, "num_envs_per_worker": 1, "create_env_on_driver": False, "rollout_fragment_length": 200,
    "batch_mode": "truncate_episodes", "gamma": 0.99, "lr": 0.0001, "train_batch_size": 200, "model": None,
    "optimizer": {}, "horizon": None, "soft_horizon": False, "no_done_at_end": False, "env": None,
    "observation_space": None, "action_space": None, "env_config": {}, "remote_worker_envs": False,
    "remote_env_batch_wait_ms": 0, "env_task_fn": None, "render_env": False, "record_env": False,
    "clip_rewards": None, "normalize_actions": True, "clip_actions": False, "preprocessor_pref": "deepmind",
    "log_level": "WARN", "callbacks": DefaultCallbacks, "ignore_worker_failures": False, "log_sys_usage": True,
    "fake_sampler": False, "framework": "tf", "eager_tracing": False, "eager_max_retraces": 20, "explore": True,
    "exploration_config": {"type": "StochasticSampling"}, "evaluation_interval": None,
    "evaluation_num_episodes": 10, "evaluation_parallel_to_training": False, "in_evaluation": False,
    "evaluation_config": {}, "evaluation_num_workers": 0, "custom_eval_function": None, "sample_async": False,
    "sample_collector": SimpleListCollector, "observation_filter": "NoFilter", "synchronize_filters": True,
    "tf_session_args": TF_SESSION_ARGS, "local_tf_session_args": LOCAL_TF_SESSION_ARGS,
    "compress_observations": False, "collect_metrics_timeout": 180, "metrics_smoothing_episodes": 100,
    "min_iter_time_s": 0, "timesteps_per_iteration": 0, "seed": None, "extra_python_environs_for_driver": {},
    "extra_python_environs_for_worker": {}, "num_gpus": 0, "_fake_gpus": False, "num_cpus_per_worker": 1,
    "num_gpus_per_worker": 0, "custom_resources_per_worker": {}, "num_cpus_for_driver": 1,
    "placement_strategy": "PACK", "input": "sampler", "input_config": {}, "actions_in_input_normalized": False,
    "input_evaluation": ["is", "wis"], "postprocess_inputs": False, "shuffle_buffer_size": 0, "output": None,
    "output_compress_columns": ["obs", "new_obs"], "output_max_file_size": 64 * 1024 * 1024,
    "multiagent": {"policies": {}, "policy_map_capacity": 100, "policy_map_cache": None,
                   "policy_mapping_fn": None, "policies_to_train": None, "observation_fn": None,
                   "replay_mode": "independent", "count_steps_by": "env_steps"},
    "logger_config": None, "_tf_policy_handles_more_than_one_loss": False, "_disable_preprocessor_api": False,
    "simple_optimizer": DEPRECATED_VALUE, "monitor": DEPRECATED_VALUE,
}
_COMMON_1_10 = {
    **{k: v for k, v in _COMMON_1_6.items() if k not in ("collect_metrics_timeout", "metrics_smoothing_episodes",
                                                         "min_iter_time_s", "evaluation_num_episodes")},
    "evaluation_duration": 10, "evaluation_duration_unit": "episodes", "always_attach_evaluation_results": False,
    "metrics_episode_collection_timeout_s": 180, "metrics_num_episodes_for_smoothing": 100,
    "min_time_s_per_reporting": None, "min_train_timesteps_per_reporting": None,
    "min_sample_timesteps_per_reporting": None, "_disable_action_flattening": False,
    "_disable_execution_plan_api": False,
    # the deprecated keys, as placeholders
    "evaluation_num_episodes": DEPRECATED_VALUE, "metrics_smoothing_episodes": DEPRECATED_VALUE,
    "min_iter_time_s": DEPRECATED_VALUE, "collect_metrics_timeout": DEPRECATED_VALUE,
}
_COMMON_1_13 = {
    **_COMMON_1_10,
    "recreate_failed_workers": False, "restart_failed_sub_environments": False,
    "num_consecutive_worker_failures_tolerance": 100, "disable_env_checking": False,
    "keep_per_episode_custom_metrics": False, "evaluation_sample_timeout_s": 180.0, "output_config": {},
    "off_policy_estimation_methods": {}, "_disable_execution_plan_api": True,
}
COMMON_CONFIG = {"1.6": _COMMON_1_6, "1.10": _COMMON_1_10, "1.13": _COMMON_1_13}

_EPSILON_GREEDY = {"type": "EpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.02, "epsilon_timesteps": 10000}
_DQN_MODEL = {"num_atoms": 1, "v_min": -10.0, "v_max": 10.0, "noisy": False, "sigma0": 0.5, "dueling": True,
              "hiddens": [256], "double_q": True, "n_step": 1}
_PRIORITIES = {"prioritized_replay_alpha": 0.6, "prioritized_replay_beta": 0.4,
               "final_prioritized_replay_beta": 0.4, "prioritized_replay_beta_annealing_timesteps": 20000,
               "prioritized_replay_eps": 1e-6}

SIMPLE_Q = {
    "1.6": {
        "exploration_config": _EPSILON_GREEDY, "evaluation_config": {"explore": False},
        "timesteps_per_iteration": 1000, "target_network_update_freq": 500, "buffer_size": 50000,
        "store_buffer_in_checkpoints": False, "replay_sequence_length": 1, "lr": 5e-4, "lr_schedule": None,
        "adam_epsilon": 1e-8, "grad_clip": 40, "learning_starts": 1000, "rollout_fragment_length": 4,
        "train_batch_size": 32, "num_workers": 0, "min_iter_time_s": 1,
    },
    "1.10": {
        "exploration_config": _EPSILON_GREEDY, "evaluation_config": {"explore": False},
        "timesteps_per_iteration": 1000, "target_network_update_freq": 500, "buffer_size": DEPRECATED_VALUE,
        "replay_buffer_config": {"type": "MultiAgentReplayBuffer", "capacity": 50000},
        "store_buffer_in_checkpoints": False, "replay_sequence_length": 1, "lr": 5e-4, "lr_schedule": None,
        "adam_epsilon": 1e-8, "grad_clip": 40, "learning_starts": 1000, "rollout_fragment_length": 4,
        "train_batch_size": 32, "num_workers": 0, "min_time_s_per_reporting": 1,
    },
    "1.13": {
        "exploration_config": _EPSILON_GREEDY, "evaluation_config": {"explore": False},
        "min_sample_timesteps_per_reporting": 1000, "target_network_update_freq": 500,
        "buffer_size": DEPRECATED_VALUE, "prioritized_replay": DEPRECATED_VALUE, "learning_starts": DEPRECATED_VALUE,
        "replay_batch_size": DEPRECATED_VALUE, "replay_sequence_length": DEPRECATED_VALUE,
        "prioritized_replay_alpha": DEPRECATED_VALUE, "prioritized_replay_beta": DEPRECATED_VALUE,
        "prioritized_replay_eps": DEPRECATED_VALUE,
        "replay_buffer_config": {"_enable_replay_buffer_api": True, "learning_starts": 1000,
                                 "type": "MultiAgentReplayBuffer", "capacity": 50000, "replay_batch_size": 32,
                                 "replay_sequence_length": 1},
        "store_buffer_in_checkpoints": False, "lr": 5e-4, "lr_schedule": None, "adam_epsilon": 1e-8,
        "grad_clip": 40, "rollout_fragment_length": 4, "train_batch_size": 32, "num_workers": 0,
        "min_time_s_per_reporting": 1,
    },
}
DQN = {
    "1.6": {**_DQN_MODEL, **_PRIORITIES, "prioritized_replay": True, "before_learn_on_batch": None,
            "training_intensity": None, "worker_side_prioritization": False},
    "1.10": {**_DQN_MODEL, **_PRIORITIES, "prioritized_replay": True, "before_learn_on_batch": None,
             "training_intensity": None, "worker_side_prioritization": False},
    "1.13": {**_DQN_MODEL, "replay_buffer_config": {
        "_enable_replay_buffer_api": True, "type": "MultiAgentPrioritizedReplayBuffer", "capacity": 50000,
        "prioritized_replay_alpha": 0.6, "prioritized_replay_beta": 0.4, "prioritized_replay_eps": 1e-6,
        "replay_sequence_length": 1, "learning_starts": 1000, "replay_batch_size": 32,
        "worker_side_prioritization": False},
        "before_learn_on_batch": None, "training_intensity": None, "td_error_loss_fn": "huber",
        "categorical_distribution_temperature": 1.0},
}
R2D2 = {
    "1.6": {"adam_epsilon": 1e-3, "lr": 1e-4, "gamma": 0.997, "train_batch_size": 1000,
            "target_network_update_freq": 2500, "batch_mode": "complete_episodes", "buffer_size": 100000,
            "replay_sequence_length": -1, "burn_in": 0, "zero_init_states": True, "use_h_function": True,
            "h_function_epsilon": 1e-3, "num_workers": 2},
    "1.13": {"lr": 1e-4, "gamma": 0.997, "train_batch_size": 64, "adam_epsilon": 1e-3, "num_workers": 2,
             "batch_mode": "complete_episodes",
             "replay_buffer_config": {"_enable_replay_buffer_api": True, "type": "MultiAgentReplayBuffer",
                                      "capacity": 100000, "storage_unit": "sequences", "replay_sequence_length": -1,
                                      "replay_burn_in": 0},
             "zero_init_states": True, "use_h_function": True, "h_function_epsilon": 1e-3,
             "target_network_update_freq": 2500, "burn_in": DEPRECATED_VALUE},
}
R2D2["1.10"] = R2D2["1.6"]  # the top-level replay keys still, over SimpleQ's replay_buffer_config
VERSIONS = ("1.6", "1.10", "1.13")


def merge(base: dict, extra: dict) -> dict:
    """``Trainer.merge_trainer_configs``: ``extra`` over ``base``, nested dicts key by key (an
    ``exploration_config`` of another ``type`` replaces the whole dict)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and value and not (
                key == "exploration_config" and value.get("type") != out[key].get("type")):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_config(algo: str, version: str) -> dict:
    """RLlib ``version``'s ``DEFAULT_CONFIG`` of ``algo`` (``"simple_q"``, ``"dqn"``, ``"r2d2"``)."""
    common = {**COMMON_CONFIG[version], "model": copy.deepcopy(MODEL_DEFAULTS[version])}
    config = merge(common, SIMPLE_Q[version])
    if algo in ("dqn", "r2d2"):
        config = merge(config, DQN[version])
    if algo == "r2d2":
        config = merge(config, R2D2[version])
    return config
