"""RLlib 1.x's config keys, mapped onto ours: the tables of what ``from_rllib`` maps, ignores,
accepts only at RLlib's default, or renames, and the mapping itself.

Every key of RLlib 1.x's COMMON_CONFIG, DQN / SimpleQ DEFAULT_CONFIG and MODEL_DEFAULTS falls in
exactly one class (``tests/test_rllib_keys.py`` lists them all): one of our fields (mapped),
``IGNORED_KEYS`` (RLlib's machinery), ``FIXED_KEYS`` (accepted at RLlib's default only) or
``RENAMED_KEYS`` (a later name of one of ours). The tables are data; ``map_rllib`` walks them.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping

from jaxdqn.config import RLLIB_RUN_NAMES, DQNConfig, ExplorationConfig, ModelConfig, atari_game, config_class
from jaxdqn.config.fields import fail, is_number, section, unknown_key

UNKNOWN = "unknown or unsupported RLlib config key"

# How ``from_rllib`` treats every key of RLlib 1.x's COMMON_CONFIG, DQN / SimpleQ DEFAULT_CONFIG
# and MODEL_DEFAULTS that is not one of our fields (docs/rllib.md, "RLlib keys"):
#
# IGNORED: keys that steer only RLlib's own machinery (processes, resources, frameworks, logging,
# offline I/O knobs that apply only to an offline input we refuse anyway); any value is accepted.
IGNORED_KEYS = frozenset({
    "eager_tracing", "eager_max_retraces", "num_cpus_per_worker", "num_gpus_per_worker",
    "num_cpus_for_driver", "custom_resources_per_worker", "memory", "object_store_memory",
    "memory_per_worker", "object_store_memory_per_worker", "placement_strategy",
    "extra_python_environs_for_driver", "extra_python_environs_for_worker", "log_level",
    "log_sys_usage", "logger_config", "simple_optimizer", "_fake_gpus", "_disable_execution_plan_api",
    "_use_trajectory_view_api", "tf_session_args", "local_tf_session_args", "ignore_worker_failures",
    "recreate_failed_workers", "collect_metrics_timeout", "create_env_on_driver", "remote_worker_envs",
    "remote_env_batch_wait_ms", "evaluation_num_workers", "evaluation_parallel_to_training",
    "synchronize_filters", "compress_observations", "store_buffer_in_checkpoints",
    "timesteps_per_iteration_warmup", "input_evaluation", "postprocess_inputs", "shuffle_buffer_size",
    "output_compress_columns", "output_max_file_size",
    # Only continuous or image spaces are touched by these; gymnax's discrete-action envs are not
    # (preprocessor_pref is checked for an Atari env: ``_preprocessor_pref``).
    "normalize_actions", "clip_actions", "preprocessor_pref",
})

# RLlib 1.x's gradient clipping per framework: tf policies clip each tensor's norm
# (``minimize_and_clip``), torch ones the global norm of the parameters (``apply_grad_clipping``).
FRAMEWORK_CLIP_MODES = {"tf": "per_tensor", "tf2": "per_tensor", "tfe": "per_tensor", "torch": "global_norm"}


def _grad_clip_mode(config: Mapping[str, Any]) -> dict[str, Any]:
    """``grad_clip_mode`` as RLlib's ``framework`` clips, unless the config gives one."""
    if "framework" not in config or "grad_clip_mode" in config:
        return {}
    framework = config["framework"]
    if framework not in FRAMEWORK_CLIP_MODES:
        fail("framework", framework, f"supported: {sorted(FRAMEWORK_CLIP_MODES)} (it selects RLlib's "
             "gradient clipping: tf per tensor, torch the global norm)")
    return {"grad_clip_mode": FRAMEWORK_CLIP_MODES[framework]}


def _preprocessor_pref(config: Mapping[str, Any]) -> None:
    """An Atari env is preprocessed as RLlib's ``wrap_deepmind`` (``preprocessor_pref:
    deepmind``, RLlib's default); RLlib's other choices are refused for it."""
    pref = config.get("preprocessor_pref", "deepmind")
    if atari_game(config.get("env")) is not None and pref != "deepmind":
        fail("preprocessor_pref", pref, "an Atari env is preprocessed as RLlib's wrap_deepmind: "
             "supported: 'deepmind'")
IGNORED_MODEL_KEYS = frozenset({"vf_share_layers", "free_log_std", "_time_major", "dim", "grayscale",
                                "zero_mean", "framestack", "_use_default_native_models",
                                "_disable_preprocessor_api", "_disable_action_flattening"})

# MODEL_DEFAULTS' preprocessing keys, which steer the ALE's own preprocessing for an Atari env
# (RLlib's DeepMind wrappers) and are ignored (as RLlib does) for every other env.
ATARI_MODEL_KEYS = frozenset({"dim", "framestack", "grayscale", "zero_mean"})


def _atari_option(key: str, value: Any) -> dict[str, Any]:
    """The ALE options (``env_params``) of one of RLlib's preprocessing keys for an Atari env."""
    if key == "dim":
        if not isinstance(value, int) or isinstance(value, bool) or value < 8:
            fail("model.dim", value, "must be an int >= 8 (the frames' side)")
        return {"img_height": value, "img_width": value}
    if key == "framestack":
        if not isinstance(value, bool):
            fail("model.framestack", value, "must be a bool")
        return {"stack_num": 4 if value else 1}
    if key == "grayscale" and value is not True and value is not False:
        fail("model.grayscale", value, "must be a bool")
    if key == "grayscale" and value is False:
        fail("model.grayscale", value, "only grayscale frames are supported (RLlib's DeepMind preprocessing)")
    return {}  # grayscale True; zero_mean: RLlib's DeepMind preprocessing does not use it


# FIXED: keys whose RLlib default is the only behaviour jaxdqn has: accepted at one of the listed
# values, refused otherwise with the reason (never accepted and silently ignored).
FIXED_KEYS: dict[str, tuple[tuple[Any, ...], str]] = {
    "batch_mode": (("truncate_episodes",), "rollouts are fixed-length fragments (static shapes)"),
    "observation_filter": (("NoFilter",), "observations are not filtered"),
    "worker_side_prioritization": ((False,), "priorities are computed by the learner"),
    "soft_horizon": ((False,), "episodes reset where they end"),
    "horizon": ((None,), "episode limits are the env's: set env_config max_steps_in_episode"),
    "sample_async": ((False,), "sampling is synchronous, inside the compiled loop"),
    "fake_sampler": ((False,), "there is no fake sampler"),
    "in_evaluation": ((False,), "evaluation is Trainer.evaluate()"),
    "custom_eval_function": ((None,), "evaluation is Trainer.evaluate()"),
    "input": (("sampler",), "experiences come from the environment only (no offline input)"),
    "output": ((None,), "experiences are not written out"),
    "before_learn_on_batch": ((None,), "pass the hook as Trainer(before_learn_on_batch=...)"),
    "callbacks": ((None, "DefaultCallbacks"), "there are no callbacks; results come back from train()"),
    "monitor": ((False,), "no videos or monitor files are written"),
    "record_env": ((False,), "no videos are recorded"),
    "render_env": ((False,), "environments are not rendered"),
    "model.lstm_use_prev_action_reward": ((False,), "the LSTM sees observations only"),
    "model.lstm_use_prev_action": ((False,), "the LSTM sees observations only"),
    "model.lstm_use_prev_reward": ((False,), "the LSTM sees observations only"),
    "model.use_attention": ((False,), "attention nets are not supported"),
    "model.no_final_linear": ((False,), "the Q head always ends in a linear layer"),
    "model.post_fcnet_hiddens": (([], ()), "use hiddens for the layers after the torso"),
    "model.custom_model": ((None,), "jaxdqn builds its own flax Q-network: set fcnet_hiddens / conv_filters"),
    "model.custom_model_config": (({},), "there is no custom model"),
    "model.custom_action_dist": ((None,), "Q-learning acts greedily or epsilon-greedily"),
    "model.custom_preprocessor": ((None,), "there are no preprocessors"),
}

# RENAMED: later RLlib names of the same setting (1.x's last names, and Ray 2.0's, which its
# tuned examples such as atari-duel-ddqn.yaml use): the ``rllib`` metadata of our fields.
RENAMED_KEYS = {alias: f.name for f in dataclasses.fields(DQNConfig) for alias in f.metadata["rllib"]}


def _fixed(key: str, value: Any) -> None:
    """Refuse ``value`` for a ``FIXED_KEYS`` key unless it is one of the accepted ones."""
    allowed, why = FIXED_KEYS[key]
    name = getattr(value, "__name__", None)  # a callbacks class
    if any(value == a or (name is not None and name == a) for a in allowed):
        return
    raise ValueError(f"{key}={value!r} is not supported: {why} (accepted: "
                     f"{', '.join(repr(a) for a in allowed)})")


def _model(value: Mapping[str, Any], atari_env: bool, atari_options: dict[str, Any]) -> ModelConfig:
    """Our ``ModelConfig`` of RLlib's ``model`` dict; an Atari env's preprocessing keys go to
    ``atari_options`` (the ALE's options)."""
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    model = {}
    for k, v in dict(value).items():
        if atari_env and k in ATARI_MODEL_KEYS:
            atari_options.update(_atari_option(k, v))
            continue
        if k in IGNORED_MODEL_KEYS:
            continue
        if f"model.{k}" in FIXED_KEYS:
            _fixed(f"model.{k}", v)
            continue
        if k not in model_fields:
            unknown_key(f"model.{k}", {f"model.{f}" for f in model_fields}, UNKNOWN)
        model[k] = v
    return ModelConfig(**model)


def map_rllib(cls: type, config: Mapping[str, Any]) -> dict[str, Any]:
    """Our keyword arguments of ``cls`` for an RLlib config dict: renamed keys mapped, machinery
    ignored, fixed keys checked, nested sections converted; a ``ValueError`` names any key
    that is unknown or refused."""
    fields = {f.name for f in dataclasses.fields(cls)}
    _preprocessor_pref(config)
    atari_options: dict[str, Any] = {}  # model.dim / framestack / grayscale of an Atari env
    env_config: dict[str, Any] | None = None
    out: dict[str, Any] = {}
    for key, value in config.items():
        key = RENAMED_KEYS.get(key, key)
        if key == "num_gpus":
            if is_number(value) and value >= 2:
                out["num_devices"] = int(value)  # RLlib's multi-GPU learner: our data-parallel devices
            continue  # 0 or 1 (or a fraction): where the learner runs is JAX's default device
        if key in IGNORED_KEYS:
            continue
        if key == "framework":
            out.update(_grad_clip_mode(config))
            continue
        if key in FIXED_KEYS:
            _fixed(key, value)
            continue
        if key == "seed":
            out["seed"] = 0 if value is None else value
        elif key == "model":
            out["model"] = _model(value, atari_game(config.get("env")) is not None, atari_options)
        elif key == "exploration_config":
            out[key] = section(key, value, ExplorationConfig, UNKNOWN)
        elif key == "multiagent":
            multiagent = dict(value)
            policies = multiagent.get("policies") or {}
            prioritized = config.get("prioritized_replay", cls.prioritized_replay) is True
            if multiagent.get("replay_mode", "independent") == "lockstep" and prioritized:
                raise ValueError("multiagent.replay_mode='lockstep' does not support prioritized "
                                 "replay (as in RLlib): set prioritized_replay=False or replay_mode="
                                 "'independent'")
            if multiagent.get("observation_fn") is not None:
                fail("multiagent.observation_fn", multiagent["observation_fn"],
                      "is not supported: agents observe what the environment gives them")
            if policies:
                ignored = {"observation_fn", "count_steps_by", "policy_map_capacity", "policy_map_cache"}
                if multiagent.get("count_steps_by", "env_steps") != "env_steps":
                    fail("multiagent.count_steps_by", multiagent["count_steps_by"], "supported: 'env_steps'")
                out["multiagent"] = {k: v for k, v in multiagent.items() if k not in ignored}
        elif key == "replay_buffer_config":
            buffer = dict(value)
            kind = buffer.pop("type", None)
            if kind is not None:
                kinds = {"MultiAgentReplayBuffer": False, "ReplayBuffer": False,
                         "MultiAgentPrioritizedReplayBuffer": True, "PrioritizedReplayBuffer": True}
                if kind not in kinds:
                    fail("replay_buffer_config.type", kind, f"supported: {sorted(kinds)}")
                out["prioritized_replay"] = kinds[kind]
            for k, v in buffer.items():
                target = {"capacity": "buffer_size", "replay_batch_size": None, "_enable_replay_buffer_api": None,
                          "min_size_for_sampling": "learning_starts",
                          "learning_starts": "learning_starts", "replay_sequence_length": "replay_sequence_length",
                          "replay_burn_in": "burn_in", "replay_zero_init_states": "zero_init_states"}.get(k, k)
                if target is None:
                    continue
                if target not in fields:
                    unknown_key(f"replay_buffer_config.{k}", {f"replay_buffer_config.{f}" for f in fields}, UNKNOWN)
                out[target] = v
        elif key == "env":
            out["env"] = value
        elif key == "env_config":
            env_config = dict(value or {})
        elif key in ("buffer_size",) and isinstance(value, (int, float)) and value < 0:
            continue  # RLlib's DEPRECATED_VALUE sentinel
        elif key in ("prioritized_replay",) and value is not True and value is not False:
            continue  # DEPRECATED_VALUE
        elif key in fields:
            if key in ("hiddens", "lr_schedule") and value is not None:
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            out[key] = value
        else:
            unknown_key(key, fields | set(IGNORED_KEYS) | set(FIXED_KEYS) | {"model", "exploration_config", "multiagent",
                                                                          "replay_buffer_config", "env_config"}, UNKNOWN)
    if env_config is not None or atari_options:
        out["env_params"] = {**atari_options, **(env_config or {})}
    workers = config.get("evaluation_num_workers", 0)
    if is_number(workers) and workers > 0 and not config.get("evaluation_interval"):
        # RLlib 1.x's validate_config warns the same: evaluation then runs only when asked for.
        warnings.warn(f"evaluation_num_workers={workers} without an evaluation_interval: as in RLlib, "
                      "train() does not evaluate; call Trainer.evaluate() (jaxdqn evaluates inside the "
                      "trainer's program, on no separate workers)", stacklevel=3)
    return out


def from_rllib(config: Mapping[str, Any], algo: str = "dqn") -> DQNConfig:
    """Map an RLlib DQN / SimpleQ config dict (nested ``model``, ``exploration_config``, ...) to
    our config of ``algo`` (``"dqn"`` / ``"simple_q"``, or RLlib's ``"DQN"`` / ``"SimpleQ"``).

    Keys that only steer RLlib's machinery (``num_gpus``, ``log_level``, ...) are ignored on
    purpose; ``framework`` selects its gradient clipping (tf: per tensor, torch: the global
    norm) unless ``grad_clip_mode`` is given; an unknown or unsupported key raises a
    ``ValueError`` naming it.
    """
    cls = config_class(algo)
    return cls(**map_rllib(cls, config))


__all__ = ["FIXED_KEYS", "IGNORED_KEYS", "IGNORED_MODEL_KEYS", "RENAMED_KEYS", "RLLIB_RUN_NAMES", "from_rllib",
           "map_rllib"]
