"""Static configuration: frozen, hashable dataclasses with RLlib's DQN / SimpleQ keys.

Field names and defaults follow RLlib's 1.x (execution-plan era) ``DEFAULT_CONFIG`` of DQN and
SimpleQ wherever RLlib has the key; ours are ``env``, ``env_params``, ``total_timesteps``,
``seed``, ``num_devices`` and ``td_error_loss_fn``. Everything is validated in ``__post_init__``:
a bad value raises ``ValueError`` naming the key and the allowed range, before anything compiles.
``jaxdqn.rllib.from_rllib(d)`` maps an RLlib config dict.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import Any, Literal, Mapping, get_args

import jax

# The string-valued keys' allowed values, as types (what a type checker holds code to) and as
# the tuples validation names in its messages.
Activation = Literal["tanh", "relu", "elu", "swish", "silu", "gelu", "linear"]
ExplorationType = Literal["EpsilonGreedy"]
LossFn = Literal["huber", "mse"]
GradClipMode = Literal["global_norm", "per_tensor"]
ReplayMode = Literal["independent", "lockstep"]
OptimizerType = Literal["adam", "rmsprop"]
PrngImpl = Literal["philox4x32", "threefry2x32"]
ACTIVATIONS: tuple[str, ...] = get_args(Activation)
EXPLORATION_TYPES: tuple[str, ...] = get_args(ExplorationType)
LOSS_FNS: tuple[str, ...] = get_args(LossFn)
GRAD_CLIP_MODES: tuple[str, ...] = get_args(GradClipMode)
REPLAY_MODES: tuple[str, ...] = get_args(ReplayMode)
OPTIMIZER_TYPES: tuple[str, ...] = get_args(OptimizerType)
PRNG_IMPLS: tuple[str, ...] = get_args(PrngImpl)


ATARI_NAME = re.compile(r"^(?:ALE/(?P<v5>[A-Za-z]+)-v5|(?P<v4>[A-Za-z]+)(?:NoFrameskip|Deterministic)-v4"
                        r"|(?P<ours>[A-Za-z]+)-ALE)$")


def atari_game(name: Any) -> str | None:
    """ALE's ROM id of an Atari env name (``"PongNoFrameskip-v4"``, ``"ALE/Pong-v5"`` or
    ``"Pong-ALE"`` -> ``"pong"``; ``SpaceInvaders`` -> ``space_invaders``), None for other names."""
    match = ATARI_NAME.match(name) if isinstance(name, str) else None
    if match is None:
        return None
    game = match.group("v5") or match.group("v4") or match.group("ours")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{key}={value!r} is invalid: {allowed}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _traced(x: Any) -> bool:
    """A swept value inside a vmapped trial (``jaxdqn.sweep``): checked when its trial's concrete
    config was built, so a config built around it (the traced trial's, a policy's) passes it."""
    return isinstance(x, jax.core.Tracer)


def _int(key: str, value: Any, low: int, high: float = math.inf) -> None:
    if _traced(value):
        return
    if not _is_int(value) or not low <= value <= high:
        bound = f"[{low}, {high}]" if high != math.inf else f">= {low}"
        _fail(key, value, f"must be an int {bound}")


def _number(key: str, value: Any, low: float, high: float = math.inf, *, open_low: bool = False) -> None:
    if _traced(value):
        return
    ok = _is_number(value) and (value > low if open_low else value >= low) and value <= high
    if not ok:
        low_s = f"> {low}" if open_low else f">= {low}"
        high_s = f" and <= {high}" if high != math.inf else ""
        _fail(key, value, f"must be a number {low_s}{high_s}")


def _ints(key: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        _fail(key, value, "must be a list of positive ints")
    out = tuple(value)
    if not all(_is_int(v) and v > 0 for v in out):
        _fail(key, value, "must be a list of positive ints")
    return out


def _schedule(key: str, value: Any) -> tuple[tuple[int, float], ...] | None:
    """RLlib's ``[[timestep, value], ...]``, timesteps non-decreasing and >= 0."""
    if value is None:
        return None
    try:
        points = tuple((int(t), float(v)) for t, v in value)
    except (TypeError, ValueError):
        _fail(key, value, "must be a list of [timestep, value] pairs")
    if not points or any(t < 0 for t, _ in points) or any(
        b[0] < a[0] for a, b in zip(points, points[1:])
    ):
        _fail(key, value, "must be a non-empty list of [timestep, value] pairs, timesteps >= 0 and non-decreasing")
    if any(not math.isfinite(v) or v < 0 for _, v in points):
        _fail(key, value, "values must be finite and >= 0")
    return points


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


@dataclasses.dataclass(frozen=True)
class ExplorationConfig:
    """RLlib's ``exploration_config``: epsilon-greedy, linear from ``initial`` to ``final``."""

    type: ExplorationType = "EpsilonGreedy"
    initial_epsilon: float = 1.0
    final_epsilon: float = 0.02
    epsilon_timesteps: int = 10_000

    def __post_init__(self) -> None:
        if self.type not in EXPLORATION_TYPES:
            _fail("exploration_config.type", self.type,
                  f"supported: {list(EXPLORATION_TYPES)} (noisy nets explore with noisy=True)")
        _number("exploration_config.initial_epsilon", self.initial_epsilon, 0.0, 1.0)
        _number("exploration_config.final_epsilon", self.final_epsilon, 0.0, 1.0)
        _int("exploration_config.epsilon_timesteps", self.epsilon_timesteps, 0)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """RLlib's ``optimizer`` dict ("arguments to pass to the policy optimizer"; empty there, and
    here: Adam with ``lr`` / ``adam_epsilon``). ``type="rmsprop"`` is RMSProp as PyTorch computes
    it (the MinAtar and DQN-Zoo-style references): ``v = decay v + (1 - decay) g^2``, centred
    (``v - m^2``, ``m`` the mean gradient) when ``centered``, step ``lr g / (sqrt(v) + epsilon)``.
    ``lr``, ``lr_schedule`` and ``grad_clip`` apply to both."""

    type: OptimizerType = "adam"
    decay: float = 0.95  # rmsprop: the squared-gradient (and mean-gradient) average's decay
    epsilon: float = 0.01  # rmsprop: added to the root, as PyTorch's eps
    centered: bool = True  # rmsprop

    def __post_init__(self) -> None:
        if self.type not in OPTIMIZER_TYPES:
            _fail("optimizer.type", self.type, f"supported: {list(OPTIMIZER_TYPES)}")
        _number("optimizer.decay", self.decay, 0.0, 1.0)
        _number("optimizer.epsilon", self.epsilon, 0.0, open_low=True)
        if not isinstance(self.centered, bool):
            _fail("optimizer.centered", self.centered, "must be a bool")
        if self.type == "adam":
            for f in ("decay", "epsilon", "centered"):
                default = OptimizerConfig.__dataclass_fields__[f].default
                if getattr(self, f) != default:
                    _fail(f"optimizer.{f}", getattr(self, f), "applies to optimizer type 'rmsprop' only (Adam's "
                          "epsilon is adam_epsilon)")


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """RLlib's ``evaluation_config`` overrides; only ``explore`` changes an evaluation here.

    DQN's and SimpleQ's RLlib default is ``explore=False`` (greedy evaluation); ``True`` acts
    epsilon-greedily at the training run's current epsilon (and with noise for noisy nets)."""

    explore: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.explore, bool):
            _fail("evaluation_config.explore", self.explore, "must be a bool")


def _clip_rewards(value: Any) -> Any:
    """RLlib's ``clip_rewards``: None / False (no clipping for gymnax envs), True (sign), a
    number ``c`` > 0 (clip to [-c, c]) or a pair ``(low, high)``; stored hashable."""
    if value is None or isinstance(value, bool):
        return value
    if _is_number(value) and value > 0:
        return float(value)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_number(v) for v in value) \
            and value[0] < value[1]:
        return (float(value[0]), float(value[1]))
    _fail("clip_rewards", value, "must be None, a bool, a number > 0 or a pair [low, high] with low < high")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """RLlib's ``model`` dict: the fully connected torso, a conv torso, an optional LSTM."""

    fcnet_hiddens: tuple[int, ...] = (256, 256)
    fcnet_activation: Activation = "tanh"
    # RLlib's [[out_channels, kernel, stride], ...]; None picks one from the observation shape.
    conv_filters: tuple[tuple[int, int, int], ...] | None = None
    conv_activation: Activation = "relu"
    use_lstm: bool = False
    lstm_cell_size: int = 256
    max_seq_len: int = 20

    def __post_init__(self) -> None:
        _set(self, "fcnet_hiddens", _ints("model.fcnet_hiddens", self.fcnet_hiddens))
        for key in ("fcnet_activation", "conv_activation"):
            if getattr(self, key) not in ACTIVATIONS:
                _fail(f"model.{key}", getattr(self, key), f"supported: {list(ACTIVATIONS)}")
        if self.conv_filters is not None:
            filters = []
            for f in self.conv_filters:
                try:
                    out, kernel, stride = f
                    kernel = kernel[0] if isinstance(kernel, (list, tuple)) else kernel
                    filters.append((int(out), int(kernel), int(stride)))
                except (TypeError, ValueError):
                    _fail("model.conv_filters", self.conv_filters, "must be [[out_channels, kernel, stride], ...]")
            if not filters or any(min(f) < 1 for f in filters):
                _fail("model.conv_filters", self.conv_filters, "must be a non-empty list of positive triples")
            _set(self, "conv_filters", tuple(filters))
        if not isinstance(self.use_lstm, bool):
            _fail("model.use_lstm", self.use_lstm, "must be a bool")
        _int("model.lstm_cell_size", self.lstm_cell_size, 1)
        _int("model.max_seq_len", self.max_seq_len, 1)


# DQNConfig keys a policy of a multi-agent run may override (they shape only its own learner).
@dataclasses.dataclass(frozen=True)
class QHeadConfig:
    """The Q head above the model's torso, from RLlib's flat DQN keys (``DQNConfig.head``): what
    ``networks.make_network`` needs besides the ``ModelConfig``. Validated by ``DQNConfig``."""

    hiddens: tuple[int, ...] = (256,)
    dueling: bool = True
    num_atoms: int = 1
    v_min: float = -10.0
    v_max: float = 10.0
    noisy: bool = False
    sigma0: float = 0.5


POLICY_KEYS = ("lr", "lr_schedule", "gamma", "adam_epsilon", "grad_clip", "hiddens", "dueling", "double_q",
               "num_atoms", "v_min", "v_max", "noisy", "sigma0", "td_error_loss_fn", "model",
               "target_network_update_freq", "tau")


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig:
    """RLlib's ``multiagent`` dict.

    ``policies``: policy ids, or a mapping id -> per-policy overrides of ``POLICY_KEYS`` (``None``,
    a dict, or RLlib's ``(policy_cls, obs_space, act_space, config)`` tuple whose config is used);
    stored as ``((id, ((key, value), ...)), ...)``. ``policy_mapping_fn``: agent id -> policy id,
    a mapping or a Python callable (resolved once against the env's agents when the plan is built:
    the mapping is static). ``policies_to_train``: the policies that learn (all when ``None``).
    ``replay_mode``: ``"independent"`` (one buffer per policy, each samples its own batch) or
    ``"lockstep"`` (one buffer of joint steps, all policies replay the same steps; uniform only).
    """

    policies: Any = ("default_policy",)
    policy_mapping_fn: Any = None  # None: every agent -> the only policy
    policies_to_train: tuple[str, ...] | None = None
    replay_mode: ReplayMode = "independent"

    def __post_init__(self) -> None:
        policies = self.policies
        if isinstance(policies, Mapping):
            policies = list(policies.items())
        entries = []
        for entry in policies or ():
            pid, overrides = (entry, None) if isinstance(entry, str) else tuple(entry)
            if isinstance(overrides, (tuple, list)) and len(overrides) == 4 and not isinstance(overrides[0], (tuple, list)):
                overrides = overrides[3]  # RLlib's (policy_cls, obs_space, act_space, config)
            overrides = dict(overrides or {})
            for key in overrides:
                if key not in POLICY_KEYS:
                    _fail(f"multiagent.policies.{pid}.{key}", overrides[key],
                          f"a policy may override only {list(POLICY_KEYS)}")
            if overrides.get("model", {}) and dict(overrides["model"]).get("use_lstm"):
                _fail(f"multiagent.policies.{pid}.model.use_lstm", True, "recurrent multi-agent policies are not supported")
            entries.append((str(pid), tuple(sorted(overrides.items()))))
        if not entries:
            _fail("multiagent.policies", self.policies, "must name at least one policy")
        ids = [pid for pid, _ in entries]
        if len(set(ids)) != len(ids):
            _fail("multiagent.policies", ids, "must not repeat a policy id")
        _set(self, "policies", tuple(entries))
        mapping = self.policy_mapping_fn
        if mapping is None and len(ids) > 1:
            _fail("multiagent.policy_mapping_fn", None, f"is required with several policies {ids}")
        if isinstance(mapping, Mapping) or isinstance(mapping, (tuple, list)):
            mapping = tuple(sorted((str(a), str(p)) for a, p in dict(mapping).items()))
            bad = sorted({p for _, p in mapping} - set(ids))
            if bad:
                _fail("multiagent.policy_mapping_fn", dict(mapping), f"maps to unknown policies {bad}; policies: {ids}")
            _set(self, "policy_mapping_fn", mapping)
        elif mapping is not None and not callable(mapping):
            _fail("multiagent.policy_mapping_fn", mapping, "must be a mapping agent id -> policy id, or a callable")
        if self.policies_to_train is not None:
            train = tuple(str(p) for p in self.policies_to_train)
            if not set(train) <= set(ids):
                _fail("multiagent.policies_to_train", list(train), f"must be a subset of the policies {ids}")
            _set(self, "policies_to_train", train)
        if self.replay_mode not in REPLAY_MODES:
            _fail("multiagent.replay_mode", self.replay_mode, f"supported: {list(REPLAY_MODES)}")

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(pid for pid, _ in self.policies)

    def policy_of(self, agents: tuple[str, ...]) -> dict[str, str]:
        """The static agent -> policy mapping for ``agents`` (the env's); refuses an agent that the
        mapping leaves out or maps to an unknown policy, naming it."""
        mapping = self.policy_mapping_fn
        if mapping is None:
            return {agent: self.policy_ids[0] for agent in agents}
        if callable(mapping):
            out = {agent: mapping(agent) for agent in agents}
        else:
            out = dict(mapping)
            missing = sorted(set(agents) - set(out))
            if missing:
                _fail("multiagent.policy_mapping_fn", dict(mapping), f"does not map the agents {missing}")
            out = {agent: out[agent] for agent in agents}
        bad = {a: p for a, p in out.items() if p not in self.policy_ids}
        if bad:
            _fail("multiagent.policy_mapping_fn", bad, f"maps to unknown policies; policies: {list(self.policy_ids)}")
        return out


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN (Rainbow-capable) configuration; the defaults are RLlib 1.x's DQN defaults."""

    # --- our keys ---
    env: str = "CartPole-v1"
    env_params: tuple[tuple[str, Any], ...] = ()  # a mapping is accepted and stored sorted
    total_timesteps: int = 100_000
    seed: int = 0
    num_devices: int | str = 1  # devices the plan is pmapped over; "auto": all of them
    # The plan's random stream, the same in every layout (docs/design.md "Random streams"):
    # Philox-4x32 lowers unrolled (XLA:CPU runs threefry2x32, JAX's default, as rolled loops).
    prng_impl: PrngImpl = "philox4x32"
    td_error_loss_fn: LossFn = "huber"
    # --- RLlib's common keys ---
    gamma: float = 0.99
    lr: float = 5e-4
    lr_schedule: tuple[tuple[int, float], ...] | None = None
    train_batch_size: int = 32
    rollout_fragment_length: int = 4
    num_workers: int = 0
    num_envs_per_worker: int = 1
    timesteps_per_iteration: int = 1000
    evaluation_num_episodes: int = 10
    evaluation_interval: int | None = None  # evaluate every N train() calls (None: never on its own)
    evaluation_config: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    explore: bool = True  # False: training rollouts act greedily (no epsilon, no noise)
    clip_rewards: bool | float | tuple[float, float] | None = None
    no_done_at_end: bool = False  # True: episode ends bootstrap, as a truncation does
    metrics_smoothing_episodes: int = 100
    min_iter_time_s: float = 0.0
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    exploration_config: ExplorationConfig = dataclasses.field(default_factory=ExplorationConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    # --- SimpleQ / DQN keys ---
    adam_epsilon: float = 1e-8
    grad_clip: float | None = 40.0
    grad_clip_mode: GradClipMode = "global_norm"  # ours: RLlib torch's global norm, or RLlib tf's per tensor
    buffer_size: int = 50_000
    learning_starts: int = 1000
    target_network_update_freq: int = 500
    tau: float = 1.0
    prioritized_replay: bool = True
    prioritized_replay_alpha: float = 0.6
    prioritized_replay_beta: float = 0.4
    final_prioritized_replay_beta: float = 0.4
    prioritized_replay_beta_annealing_timesteps: int = 20_000
    prioritized_replay_eps: float = 1e-6
    n_step: int = 1
    double_q: bool = True
    dueling: bool = True
    hiddens: tuple[int, ...] = (256,)
    num_atoms: int = 1
    v_min: float = -10.0
    v_max: float = 10.0
    noisy: bool = False
    sigma0: float = 0.5
    training_intensity: float | None = None
    replay_sequence_length: int = 1
    burn_in: int = 0
    zero_init_states: bool = True
    multiagent: MultiAgentConfig | None = None  # None: single-agent (or one shared policy on a multi-agent env)

    def __post_init__(self) -> None:
        multi_agent_object = hasattr(self.env, "agents") and hasattr(self.env, "step_env")
        if not multi_agent_object and (not isinstance(self.env, str) or not self.env):
            _fail("env", self.env, "must be a gymnax environment name such as 'CartPole-v1' (or a "
                  "jaxdqn.multi_agent_envs.MultiAgentEnv object)")
        params = self.env_params
        if isinstance(params, Mapping):
            params = tuple(sorted(params.items()))
        try:
            params = tuple((str(k), v) for k, v in params)
        except (TypeError, ValueError):
            _fail("env_params", self.env_params, "must be a mapping of gymnax EnvParams fields")
        _set(self, "env_params", params)
        _int("total_timesteps", self.total_timesteps, 1)
        _int("seed", self.seed, 0)
        if self.num_devices != "auto" and (not _is_int(self.num_devices) or self.num_devices < 1):
            _fail("num_devices", self.num_devices, "must be an int >= 1 or 'auto' (every device)")
        if self.prng_impl not in PRNG_IMPLS:
            _fail("prng_impl", self.prng_impl, f"supported: {list(PRNG_IMPLS)}")
        if self.td_error_loss_fn not in LOSS_FNS:
            _fail("td_error_loss_fn", self.td_error_loss_fn, f"supported: {list(LOSS_FNS)}")
        _number("gamma", self.gamma, 0.0, 1.0)
        _number("lr", self.lr, 0.0, open_low=True)
        _set(self, "lr_schedule", _schedule("lr_schedule", self.lr_schedule))
        _int("train_batch_size", self.train_batch_size, 1)
        _int("rollout_fragment_length", self.rollout_fragment_length, 1)
        _int("num_workers", self.num_workers, 0)
        _int("num_envs_per_worker", self.num_envs_per_worker, 1)
        _int("timesteps_per_iteration", self.timesteps_per_iteration, 1)
        _int("evaluation_num_episodes", self.evaluation_num_episodes, 1)
        if self.evaluation_interval is not None:
            _int("evaluation_interval", self.evaluation_interval, 1)
        if not isinstance(self.evaluation_config, EvaluationConfig):
            if not isinstance(self.evaluation_config, Mapping):
                _fail("evaluation_config", self.evaluation_config, "must be a mapping such as {'explore': False}")
            known = {f.name for f in dataclasses.fields(EvaluationConfig)}
            for k in self.evaluation_config:
                if k not in known:
                    _unknown(f"evaluation_config.{k}", {f"evaluation_config.{f}" for f in known},
                             "unsupported evaluation_config key (evaluation runs the training env and config)")
            _set(self, "evaluation_config", EvaluationConfig(**dict(self.evaluation_config)))
        for key in ("explore", "no_done_at_end"):
            if not isinstance(getattr(self, key), bool):
                _fail(key, getattr(self, key), "must be a bool")
        _set(self, "clip_rewards", _clip_rewards(self.clip_rewards))
        _int("metrics_smoothing_episodes", self.metrics_smoothing_episodes, 1)
        _number("min_iter_time_s", self.min_iter_time_s, 0.0)
        if self.grad_clip_mode not in GRAD_CLIP_MODES:
            _fail("grad_clip_mode", self.grad_clip_mode, f"supported: {list(GRAD_CLIP_MODES)}")
        if not isinstance(self.model, ModelConfig):
            _set(self, "model", ModelConfig(**dict(self.model)))
        for key, cls in (("exploration_config", ExplorationConfig), ("optimizer", OptimizerConfig)):
            value = getattr(self, key)
            if not isinstance(value, cls):
                if not isinstance(value, Mapping):
                    _fail(key, value, f"must be a mapping of {[f.name for f in dataclasses.fields(cls)]}")
                known = {f.name for f in dataclasses.fields(cls)}
                for k in value:
                    if k not in known:
                        _unknown(f"{key}.{k}", {f"{key}.{f}" for f in known}, "unknown config key")
                _set(self, key, cls(**dict(value)))
        if self.multiagent is not None and not isinstance(self.multiagent, MultiAgentConfig):
            if not isinstance(self.multiagent, Mapping):
                _fail("multiagent", self.multiagent, "must be a mapping with policies, policy_mapping_fn, ...")
            known = {f.name for f in dataclasses.fields(MultiAgentConfig)}
            for k in self.multiagent:
                if k not in known:
                    _unknown(f"multiagent.{k}", {f"multiagent.{f}" for f in known}, "unknown config key")
            _set(self, "multiagent", MultiAgentConfig(**dict(self.multiagent)))
        if self.multiagent is not None:
            if self.multiagent.replay_mode == "lockstep" and self.prioritized_replay:
                _fail("multiagent.replay_mode", "lockstep", "does not support prioritized replay (as in RLlib): "
                      "set prioritized_replay=False or replay_mode='independent'")
            if self.model.use_lstm:
                _fail("model.use_lstm", True, "recurrent multi-agent policies are not supported; "
                      "remove the multiagent section or the LSTM")
        _number("adam_epsilon", self.adam_epsilon, 0.0, open_low=True)
        if self.optimizer.type != "adam" and self.adam_epsilon != DQNConfig.__dataclass_fields__["adam_epsilon"].default:
            _fail("adam_epsilon", self.adam_epsilon, f"applies to Adam only; optimizer type is "
                  f"{self.optimizer.type!r} (set optimizer.epsilon)")
        if self.grad_clip is not None:
            _number("grad_clip", self.grad_clip, 0.0, open_low=True)
        _int("buffer_size", self.buffer_size, 1, 2**30 - 1)
        _int("learning_starts", self.learning_starts, 0)
        _int("target_network_update_freq", self.target_network_update_freq, 0)
        _number("tau", self.tau, 0.0, 1.0, open_low=True)
        for key in ("prioritized_replay", "double_q", "dueling", "noisy", "zero_init_states"):
            if not isinstance(getattr(self, key), bool):
                _fail(key, getattr(self, key), "must be a bool")
        _number("prioritized_replay_alpha", self.prioritized_replay_alpha, 0.0)
        _number("prioritized_replay_beta", self.prioritized_replay_beta, 0.0)
        _number("final_prioritized_replay_beta", self.final_prioritized_replay_beta, 0.0)
        _int("prioritized_replay_beta_annealing_timesteps", self.prioritized_replay_beta_annealing_timesteps, 0)
        _number("prioritized_replay_eps", self.prioritized_replay_eps, 0.0, open_low=True)
        _int("n_step", self.n_step, 1)
        # RLlib DQN's validate_config: a fragment holds at least one n-step window.
        _set(self, "rollout_fragment_length", max(self.rollout_fragment_length, self.n_step))
        _set(self, "hiddens", _ints("hiddens", self.hiddens))
        _int("num_atoms", self.num_atoms, 1)
        _number("v_min", self.v_min, -math.inf)
        _number("v_max", self.v_max, -math.inf)
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            _fail("v_min", self.v_min, f"must be < v_max={self.v_max} when num_atoms > 1")
        _number("sigma0", self.sigma0, 0.0, open_low=True)
        if self.training_intensity is not None:
            _number("training_intensity", self.training_intensity, 0.0, open_low=True)
        _int("replay_sequence_length", self.replay_sequence_length, 1)
        _int("burn_in", self.burn_in, 0)
        if self.burn_in >= self.sequence_length:
            _fail("burn_in", self.burn_in, f"must be < the sequence length {self.sequence_length} "
                  f"(replay_sequence_length, or model.max_seq_len + burn_in when it is 1) so that a "
                  f"sequence trains on at least one step")
        if self.burn_in and not self.model.use_lstm:
            _fail("burn_in", self.burn_in, "must be 0 unless model.use_lstm=True (burn-in warms up a recurrent state)")
        if self.replay_sequence_length > 1 and not self.model.use_lstm:
            _fail("replay_sequence_length", self.replay_sequence_length,
                  "must be 1 unless model.use_lstm=True (sequences are for recurrent Q-networks)")
        if self.model.use_lstm and self.num_atoms > 1:
            _fail("num_atoms", self.num_atoms, "must be 1 with model.use_lstm=True (recurrent C51 is not supported)")

    @property
    def sequence_length(self) -> int:
        """Steps per replayed sequence with ``model.use_lstm`` (1 otherwise): ``replay_sequence_length``
        when set above 1, else ``model.max_seq_len + burn_in`` (RLlib R2D2's rule)."""
        if not self.model.use_lstm:
            return 1
        if self.replay_sequence_length > 1:
            return self.replay_sequence_length
        return self.model.max_seq_len + self.burn_in

    @property
    def buffer_items(self) -> int:
        """Items the replay buffer holds: ``buffer_size`` transitions, or with sequences the slices
        that cover ``buffer_size`` timesteps (each brings ``sequence_length - burn_in`` new ones)."""
        return max(1, self.buffer_size // (self.sequence_length - self.burn_in)) if self.model.use_lstm \
            else self.buffer_size

    @property
    def head(self) -> QHeadConfig:
        """The Q head's keys as the sub-config ``networks.make_network`` takes."""
        return QHeadConfig(hiddens=self.hiddens, dueling=self.dueling, num_atoms=self.num_atoms, v_min=self.v_min,
                           v_max=self.v_max, noisy=self.noisy, sigma0=self.sigma0)

    @property
    def num_envs(self) -> int:
        """Environments stepped in parallel: RLlib's workers multiply the per-worker envs."""
        return self.num_envs_per_worker * max(1, self.num_workers)

    def replace(self, **changes: Any) -> "DQNConfig":
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class SimpleQConfig(DQNConfig):
    """RLlib 1.x's SimpleQ: DQN without double Q, dueling, n-step, prioritized replay, C51 or noisy
    nets, whose policy applies no gradient clipping and no learning-rate schedule (a plain Adam
    at ``lr``), copies its target network whole (no ``tau``), and whose execution plan alternates one store and one replay (no
    ``training_intensity``: the replay ratio is the native ``train_batch_size /
    (rollout_fragment_length * num_envs)``). Those keys are refused rather than ignored."""

    prioritized_replay: bool = False
    double_q: bool = False
    dueling: bool = False
    hiddens: tuple[int, ...] = ()
    grad_clip: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        off = {"double_q": False, "dueling": False, "prioritized_replay": False, "noisy": False,
               "n_step": 1, "num_atoms": 1}
        for key, value in off.items():
            if getattr(self, key) != value:
                _fail(key, getattr(self, key), f"SimpleQ requires {key}={value!r}; use DQNConfig for it")
        plain = {"grad_clip": (None, "RLlib's SimpleQ policy never clips gradients"),
                 "lr_schedule": (None, "RLlib's SimpleQ policy has no learning-rate schedule"),
                 "training_intensity": (None, "RLlib's SimpleQ plan alternates one store and one replay "
                                              "(set rollout_fragment_length / train_batch_size instead)"),
                 "adam_epsilon": (1e-8, "RLlib's SimpleQ policy uses Adam's default epsilon"),
                 "tau": (1.0, "RLlib's SimpleQ policy copies the target network whole")}
        for key, (value, why) in plain.items():
            if getattr(self, key) != value:
                _fail(key, getattr(self, key), f"SimpleQ requires {key}={value!r}: {why}; use DQNConfig for it")


def _unknown(key: str, known: set[str], what: str = "unknown or unsupported RLlib config key") -> None:
    close = difflib.get_close_matches(key, sorted(known), n=3)
    hint = f" Did you mean {close}?" if close else ""
    raise ValueError(f"{what} {key!r}.{hint} Remove it, or see jaxdqn.DQNConfig for the supported keys.")


# The sub-configs: nested mappings in files, dotted keys (``model.fcnet_hiddens``) in sweeps.
NESTED: dict[str, type] = {"model": ModelConfig, "exploration_config": ExplorationConfig,
                           "evaluation_config": EvaluationConfig, "optimizer": OptimizerConfig}

ALGOS: dict[str, type] = {"dqn": DQNConfig, "simple_q": SimpleQConfig}
RLLIB_RUN_NAMES = {"DQN": "dqn", "SimpleQ": "simple_q", "dqn": "dqn", "simple_q": "simple_q"}


def algo_of(config: DQNConfig) -> str:
    """``"dqn"`` or ``"simple_q"``."""
    return "simple_q" if isinstance(config, SimpleQConfig) else "dqn"


def config_class(algo: str) -> type:
    """The config class of an algorithm name (ours, or RLlib's ``run:`` value)."""
    if algo not in RLLIB_RUN_NAMES:
        _fail("algo", algo, f"supported: {sorted(ALGOS)} (RLlib's 'DQN', 'SimpleQ' also accepted)")
    return ALGOS[RLLIB_RUN_NAMES[algo]]


def to_dict(config: DQNConfig) -> dict[str, Any]:
    """Our keys as plain JSON / YAML data (tuples become lists, env_params a mapping)."""

    def plain(x: Any) -> Any:
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    if not isinstance(config.env, str):
        raise ValueError(f"env={config.env!r} is an object: configs are written with environment names; "
                         f"add it to jaxdqn.multi_agent_envs.REGISTRY under a name")
    out = plain(dataclasses.asdict(config))
    out["env_params"] = {k: v for k, v in config.env_params}
    ma = config.multiagent
    if ma is not None:
        if callable(ma.policy_mapping_fn):
            raise ValueError("multiagent.policy_mapping_fn is a callable: resolve it to a mapping first "
                             "(the Trainer does; see MultiAgentConfig.policy_of)")
        out["multiagent"] = {
            "policies": {pid: {k: plain(dataclasses.asdict(v)) if dataclasses.is_dataclass(v) else plain(v)
                               for k, v in overrides} for pid, overrides in ma.policies},
            "policy_mapping_fn": dict(ma.policy_mapping_fn) if ma.policy_mapping_fn else None,
            "policies_to_train": list(ma.policies_to_train) if ma.policies_to_train is not None else None,
            "replay_mode": ma.replay_mode,
        }
    return out


def from_dict(data: Mapping[str, Any], algo: str = "dqn") -> DQNConfig:
    """The inverse of ``to_dict`` (any subset of our keys; the rest keep their defaults).

    An unknown key, top-level or nested, raises ``ValueError`` with a did-you-mean hint."""
    cls = config_class(algo)
    fields = {f.name for f in dataclasses.fields(cls)}
    nested = NESTED
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            _unknown(key, fields, "unknown config key")
        if key in nested and isinstance(value, Mapping):
            sub = {f.name for f in dataclasses.fields(nested[key])}
            for k in value:
                if k not in sub:
                    _unknown(f"{key}.{k}", {f"{key}.{f}" for f in sub}, "unknown config key")
            value = nested[key](**value)
        kwargs[key] = value
    return cls(**kwargs)
