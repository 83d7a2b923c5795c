"""RLlib 1.x's config keys, mapped onto ours: the tables of what ``from_rllib`` maps, ignores,
accepts only at RLlib's default, or renames, and the mapping itself.

Every key of RLlib 1.x's COMMON_CONFIG, DQN / SimpleQ DEFAULT_CONFIG and MODEL_DEFAULTS falls in
exactly one class (``tests/test_rllib_keys.py`` lists them all): one of our fields (mapped),
``IGNORED_KEYS`` (RLlib's machinery), ``FIXED_KEYS`` (accepted at RLlib's default only) or
``RENAMED_KEYS`` (a later name of one of ours). The tables are data; ``map_rllib`` walks them.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Mapping

from jaxdqn.config import (RLLIB_RUN_NAMES, DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig, atari_game,
                           config_class)
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
    "_use_trajectory_view_api", "tf_session_args", "local_tf_session_args",
    "collect_metrics_timeout", "create_env_on_driver", "remote_worker_envs",
    "remote_env_batch_wait_ms", "evaluation_num_workers", "evaluation_parallel_to_training",
    "synchronize_filters", "compress_observations", "store_buffer_in_checkpoints",
    "timesteps_per_iteration_warmup", "input_evaluation", "postprocess_inputs", "shuffle_buffer_size",
    "output_compress_columns", "output_max_file_size",
    # RLlib 1.6-1.13's later machinery: API switches, timeouts, fault tolerance, env checking,
    # its sample collector, and offline-only settings (``input`` is refused unless "sampler")
    "_tf_policy_handles_more_than_one_loss", "_disable_preprocessor_api", "_disable_action_flattening",
    "metrics_episode_collection_timeout_s", "evaluation_sample_timeout_s", "disable_env_checking",
    "restart_failed_sub_environments", "sample_collector",
    "input_config", "actions_in_input_normalized", "off_policy_estimation_methods", "output_config",
    # custom_metrics are always {}: keeping their per-episode values changes nothing
    "keep_per_episode_custom_metrics",
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

# MODEL_DEFAULTS keys that change nothing here: policy-gradient and machinery keys, and the
# settings of layers that are refused (post_fcnet_hiddens other than [], use_attention=True).
IGNORED_MODEL_KEYS = frozenset({"vf_share_layers", "free_log_std", "_time_major", "dim", "grayscale",
                                "zero_mean", "framestack", "_use_default_native_models",
                                "_disable_preprocessor_api", "_disable_action_flattening", "post_fcnet_activation",
                                "attention_num_transformer_units", "attention_dim", "attention_num_heads",
                                "attention_head_dim", "attention_memory_inference", "attention_memory_training",
                                "attention_position_wise_mlp_dim", "attention_init_gru_gate_bias",
                                "attention_use_n_prev_actions", "attention_use_n_prev_rewards"})

# RLlib's placeholder of a deprecated key (ray.rllib.utils.deprecation.DEPRECATED_VALUE): 1.10 to
# 1.13 keep the old names at it once a later key holds the setting; at it they are left out, as
# RLlib's validate_config leaves them (replay_sequence_length -1 is also R2D2's "max_seq_len +
# burn_in", which is ours for 1).
DEPRECATED_VALUE = -1
DEPRECATED_KEYS = frozenset({
    "simple_optimizer", "monitor", "evaluation_num_episodes", "metrics_smoothing_episodes", "min_iter_time_s",
    "collect_metrics_timeout", "timesteps_per_iteration", "buffer_size", "prioritized_replay", "learning_starts",
    "replay_batch_size", "replay_sequence_length", "prioritized_replay_alpha", "prioritized_replay_beta",
    "prioritized_replay_eps", "burn_in", "lstm_use_prev_action_reward"})


def _is_deprecated(key: str, value: Any) -> bool:
    return key in DEPRECATED_KEYS and type(value) is int and value == DEPRECATED_VALUE

# MODEL_DEFAULTS' preprocessing keys, which steer the ALE's own preprocessing for an Atari env
# (RLlib's DeepMind wrappers) and are ignored (as RLlib does) for every other env.
ATARI_MODEL_KEYS = frozenset({"dim", "framestack", "grayscale", "zero_mean"})


def _atari_env(env: Any) -> bool:
    """An Atari game: the ALE's inside the compiled loop, Gymnasium's ALE on the host
    (``gymnasium:PongNoFrameskip-v4``) or EnvPool's (``envpool:Pong-v5``), whose options have
    the same names for RLlib's preprocessing keys."""
    if not isinstance(env, str):
        return False
    gym_id = env[len("gymnasium:"):] if env.startswith("gymnasium:") else env
    return atari_game(gym_id) is not None or re.fullmatch(r"envpool:[A-Z]\w*-v5", env) is not None


def _atari_option(key: str, value: Any) -> dict[str, Any]:
    """The ALE options (``env_params``) of one of RLlib's preprocessing keys for an Atari env."""
    if key == "dim":
        if not isinstance(value, int) or isinstance(value, bool) or value < 8:
            fail("model.dim", value, "must be an int >= 8 (the frames' side)")
        return {"img_height": value, "img_width": value}
    if key == "framestack" and not isinstance(value, bool):
        fail("model.framestack", value, "must be a bool")
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
    "ignore_worker_failures": ((False,), "a host env's workers are one vector env whose shapes need every env "
                                         "(set recreate_failed_workers)"),
    "fake_sampler": ((False,), "there is no fake sampler"),
    "in_evaluation": ((False,), "evaluation is Trainer.evaluate()"),
    "always_attach_evaluation_results": ((False,), "evaluation results come with the iterations that evaluate"),
    "evaluation_duration_unit": (("episodes",), "evaluation runs whole episodes (evaluation_duration of them)"),
    "min_train_timesteps_per_reporting": ((None, 0), "an iteration is counted in sampled env steps "
                                                     "(timesteps_per_iteration)"),
    "observation_space": ((None,), "the spaces are the env's"),
    "action_space": ((None,), "the spaces are the env's"),
    "env_task_fn": ((None,), "there are no task-settable (curriculum) envs"),
    "categorical_distribution_temperature": ((1.0,), "C51's distributions are the softmax of its logits"),
    "custom_eval_function": ((None,), "evaluation is Trainer.evaluate()"),
    "input": (("sampler",), "experiences come from the environment only (no offline input)"),
    "output": ((None,), "experiences are not written out"),
    "before_learn_on_batch": ((None,), "pass the hook as Trainer(before_learn_on_batch=...)"),
    "callbacks": ((None, "DefaultCallbacks"), "there are no callbacks; results come back from train()"),
    "monitor": ((False,), "no videos or monitor files are written"),
    "record_env": ((False,), "no videos are recorded"),
    "render_env": ((False,), "environments are not rendered"),
    "model.lstm_use_prev_action_reward": ((False, DEPRECATED_VALUE), "the LSTM sees observations only"),
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


def _frame_stack(model: Mapping[str, Any], atari_env: bool) -> dict[str, Any]:
    """The ALE's ``stack_num`` of RLlib's ``framestack`` and ``num_framestacks``: the legacy
    ``framestack=True`` (RLlib's default) stacks 4 frames whatever ``num_framestacks`` says;
    with ``framestack=False`` ``num_framestacks`` counts them ("auto": 4 for an Atari env).
    A non-Atari env's observations are not stacked: only "auto", 0 or 1 there."""
    count = model.get("num_framestacks", "auto")
    if count != "auto" and not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
        fail("model.num_framestacks", count, 'must be "auto" or an int >= 0')
    if not atari_env:
        if count not in ("auto", 0, 1):
            fail("model.num_framestacks", count, 'observations of a non-Atari env are not stacked: "auto", 0 or 1')
        return {}
    if "framestack" not in model and "num_framestacks" not in model:
        return {}
    if model.get("framestack", True) is True:
        return {"stack_num": 4}
    return {"stack_num": 4 if count == "auto" else max(1, count)}


def _model(value: Mapping[str, Any], atari_env: bool, atari_options: dict[str, Any]) -> ModelConfig:
    """Our ``ModelConfig`` of RLlib's ``model`` dict; an Atari env's preprocessing keys go to
    ``atari_options`` (the ALE's options)."""
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    model = {}
    value = {k: v for k, v in dict(value).items() if not _is_deprecated(k, v)}
    atari_options.update(_frame_stack(value, atari_env))
    for k, v in value.items():
        if k == "num_framestacks":
            continue
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


# Settings RLlib moved to later names (``RENAMED_KEYS``, ``replay_buffer_config``'s keys,
# ``evaluation_duration``) while validate_config still honours the 1.x name when it is set: a
# 1.x name wins over a later one unless it holds the "unset" value the later releases give it.
LEGACY_UNSET: dict[str, tuple[Any, ...]] = {"timesteps_per_iteration": (0, None), "min_iter_time_s": (0, None)}


def _settled(field: str, named: list[tuple[str, Any]]) -> Any:
    """The value of our ``field`` from ``(RLlib name, value)`` pairs that all set it: a 1.x name
    (our field's own) over later ones, else the later ones, which must agree."""
    legacy = [(n, v) for n, v in named if n == field and v not in LEGACY_UNSET.get(field, ())]
    chosen = legacy or [(n, v) for n, v in named if n != field] or named
    values = {repr(v) for _, v in chosen}
    if len(values) > 1:
        raise ValueError(f"{' and '.join(f'{n}={v!r}' for n, v in chosen)} set {field} differently: keep one")
    return chosen[0][1]


def _replay_buffer_config(value: Mapping[str, Any], fields: set[str], recurrent: bool,
                          set_field: Any) -> None:
    """RLlib 1.10-1.13's ``replay_buffer_config``: its ``type`` picks prioritized replay; its
    keys are the replay keys' later names."""
    buffer = {k: v for k, v in dict(value).items() if not _is_deprecated(k, v)}
    kind = buffer.pop("type", None)
    if kind is not None:
        kinds = {"MultiAgentReplayBuffer": False, "ReplayBuffer": False,
                 "MultiAgentPrioritizedReplayBuffer": True, "PrioritizedReplayBuffer": True}
        if kind not in kinds:
            fail("replay_buffer_config.type", kind, f"supported: {sorted(kinds)}")
        set_field("prioritized_replay", kinds[kind], "replay_buffer_config.type")
    unit = buffer.pop("storage_unit", None)
    if unit is not None and unit != ("sequences" if recurrent else "timesteps"):
        fail("replay_buffer_config.storage_unit", unit, "the buffer stores sequences with model.use_lstm "
             "(\"sequences\", R2D2's), else single steps (\"timesteps\")")
    if "worker_side_prioritization" in buffer:
        _fixed("worker_side_prioritization", buffer.pop("worker_side_prioritization"))
    for k, v in buffer.items():
        target = {"capacity": "buffer_size", "replay_batch_size": None, "_enable_replay_buffer_api": None,
                  "min_size_for_sampling": "learning_starts", "learning_starts": "learning_starts",
                  "replay_sequence_length": "replay_sequence_length", "replay_burn_in": "burn_in",
                  "replay_zero_init_states": "zero_init_states"}.get(k, k)
        if target is None:
            continue  # the train batch is train_batch_size; the API switch is RLlib's
        if target not in fields:
            unknown_key(f"replay_buffer_config.{k}", {f"replay_buffer_config.{f}" for f in fields}, UNKNOWN)
        set_field(target, v, f"replay_buffer_config.{k}")


def _multiagent(value: Mapping[str, Any], cls: type, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Our ``multiagent`` section of RLlib's (None when it names no policies)."""
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
    if not policies:
        return None
    if multiagent.get("count_steps_by", "env_steps") != "env_steps":
        fail("multiagent.count_steps_by", multiagent["count_steps_by"], "supported: 'env_steps'")
    ignored = {"observation_fn", "count_steps_by", "policy_map_capacity", "policy_map_cache"}
    return {k: v for k, v in multiagent.items() if k not in ignored}


def _special(key: str, value: Any, cls: type, recurrent: bool) -> bool:
    """Keys accepted only with other keys (``recurrent``: the model has an LSTM), or ignored as
    RLlib itself ignores them; True when ``key`` was dealt with here."""
    if key == "batch_mode" and value == "complete_episodes" and recurrent:
        return True  # R2D2's default: sequences never span episodes (docs/rllib.md, "sequence slices")
    if key == "grad_clip" and issubclass(cls, SimpleQConfig):
        return True  # RLlib's SimpleQ policy never applies grad_clip (its default 40 included)
    return False


def map_rllib(cls: type, config: Mapping[str, Any]) -> dict[str, Any]:
    """Our keyword arguments of ``cls`` for an RLlib config dict: renamed keys mapped, machinery
    ignored, fixed keys checked, nested sections converted; a ``ValueError`` names any key
    that is unknown or refused."""
    fields = {f.name for f in dataclasses.fields(cls)}
    _preprocessor_pref(config)
    config = {k: v for k, v in config.items() if not _is_deprecated(k, v)}
    recurrent = bool(dict(config.get("model") or {}).get("use_lstm"))
    atari_options: dict[str, Any] = {}  # model.dim / framestack / grayscale of an Atari env
    env_config: dict[str, Any] | None = None
    out: dict[str, Any] = {}
    named: dict[str, list[tuple[str, Any]]] = {}  # fields several RLlib names may set

    def set_field(field: str, value: Any, name: str) -> None:
        named.setdefault(field, []).append((name, value))

    for key, value in config.items():
        if _special(key, value, cls, recurrent):
            continue
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
            out["model"] = _model(value, _atari_env(config.get("env")), atari_options)
        elif key == "exploration_config":
            out[key] = section(key, value, ExplorationConfig, UNKNOWN)
        elif key == "multiagent":
            multiagent = _multiagent(value, cls, config)
            if multiagent is not None:
                out["multiagent"] = multiagent
        elif key == "replay_buffer_config":
            _replay_buffer_config(value, fields, recurrent, set_field)
        elif key == "evaluation_duration":
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                fail("evaluation_duration", value, "must be a number of episodes >= 1")
            set_field("evaluation_num_episodes", value, key)
        elif key == "env":
            out["env"] = value
        elif key == "env_config":
            env_config = dict(value or {})
        elif RENAMED_KEYS.get(key, key) in fields:
            field = RENAMED_KEYS.get(key, key)
            if field in ("hiddens", "lr_schedule") and value is not None:
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            if value is None and field in LEGACY_UNSET:
                value = 0  # a later release's "no minimum"
            set_field(field, value, key)
        else:
            sections = {"model", "exploration_config", "multiagent", "replay_buffer_config", "env_config"}
            unknown_key(key, fields | set(IGNORED_KEYS) | set(FIXED_KEYS) | sections, UNKNOWN)
    out.update({field: _settled(field, pairs) for field, pairs in named.items()})
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
