"""``DQNConfig`` and ``SimpleQConfig``: RLlib's flat DQN / SimpleQ keys, checked by concern, the
views that components take, and the numbers a plan may trace (``Hyperparams``)."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Literal, Mapping, NamedTuple

from jaxdqn.config.fields import (boolean, check_fields, classified, fail, integer, is_int, key, nested, number,
                                  one_of, optional, positive_ints, redefault, schedule, section, unknown_key)
from jaxdqn.config.sections import (EvaluationConfig, ExplorationConfig, LossConfig, LossFn, ModelConfig,
                                    MultiAgentConfig, OptimizerConfig, QHeadConfig)

GradClipMode = Literal["global_norm", "per_tensor"]
# The plan's random stream: JAX's implementations (its default, threefry, everywhere).
PrngImpl = Literal["threefry2x32", "rbg", "unsafe_rbg"]
DEFAULT_POLICY = "default_policy"  # RLlib's DEFAULT_POLICY_ID: the policy of a single-agent run

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


def env_name(key_: str, value: Any) -> Any:
    if hasattr(value, "agents") and hasattr(value, "step_env"):
        return value  # a multi-agent env object
    if not isinstance(value, str) or not value:
        fail(key_, value, "must be a gymnax environment name such as 'CartPole-v1' (or a "
             "jaxdqn.multiagent.MultiAgentEnv object)")
    return value


def env_params(key_: str, value: Any) -> tuple[tuple[str, Any], ...]:
    """A mapping of the env's parameters, stored sorted."""
    if isinstance(value, Mapping):
        value = tuple(sorted(value.items()))
    try:
        return tuple((str(k), v) for k, v in value)
    except (TypeError, ValueError):
        fail(key_, value, "must be a mapping of gymnax EnvParams fields")


def devices(key_: str, value: Any) -> Any:
    if value != "auto" and (not is_int(value) or value < 1):
        fail(key_, value, "must be an int >= 1 or 'auto' (every device)")
    return value


def clip_rewards(key_: str, value: Any) -> Any:
    """RLlib's ``clip_rewards``: None / False (no clipping for gymnax envs), True (sign), a
    number ``c`` > 0 (clip to [-c, c]) or a pair ``(low, high)``; stored hashable."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value) \
            and value[0] < value[1]:
        return (float(value[0]), float(value[1]))
    fail(key_, value, "must be None, a bool, a number > 0 or a pair [low, high] with low < high")


class Hyperparams(NamedTuple):
    """The numbers a plan may take traced: Python numbers from the config in a run, arrays of a
    sweep's trials under ``vmap`` (``jaxdqn.sweep``), passed beside the static config.

    Fields: the config's keys with ``traced`` metadata, the exploration ones by their own names."""

    lr: Any
    gamma: Any
    adam_epsilon: Any
    grad_clip: Any
    target_network_update_freq: Any
    tau: Any
    prioritized_replay_alpha: Any
    prioritized_replay_beta: Any
    final_prioritized_replay_beta: Any
    prioritized_replay_beta_annealing_timesteps: Any
    prioritized_replay_eps: Any
    initial_epsilon: Any
    final_epsilon: Any
    epsilon_timesteps: Any

    def replace(self, values: Mapping[str, Any]) -> "Hyperparams":
        """With ``values`` (``{dotted config key: value}``) in place of the config's."""
        return self._replace(**{k.rpartition(".")[2]: v for k, v in values.items()})


MAX_TIMESTEPS = 2_000_000_000
MAX_N_STEP = 1000  # a fragment holds n steps of every env; beyond a few dozen it is a Monte-Carlo return
MAX_SGD_PER_STEP = 256  # SGD steps per env step: beyond it an iteration would not end in hours


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN (Rainbow-capable) configuration; the defaults are RLlib 1.x's DQN defaults."""

    # --- our keys ---
    env: str = key("CartPole-v1", env_name)
    env_params: tuple[tuple[str, Any], ...] = key((), env_params)  # a mapping is accepted and stored sorted
    # The plan's step counters are int32: a run's env steps stay below 2**31.
    total_timesteps: int = key(100_000, integer(1, MAX_TIMESTEPS), resumable=True)
    seed: int = key(0, integer(0))
    num_devices: int | str = key(1, devices)  # devices the plan is pmapped over; "auto": all of them
    prng_impl: PrngImpl = key("threefry2x32", one_of(PrngImpl, " (JAX's random number generators)"))
    td_error_loss_fn: LossFn = key("huber", one_of(LossFn), policy=True)
    # --- RLlib's common keys ---
    gamma: float = key(0.99, number(0.0, 1.0), traced=True, policy=True)
    lr: float = key(5e-4, number(0.0, open_low=True), traced=True, policy=True)
    lr_schedule: tuple[tuple[int, float], ...] | None = key(None, schedule, policy=True)
    train_batch_size: int = key(32, integer(1))
    rollout_fragment_length: int = key(4, integer(1))
    num_workers: int = key(0, integer(0))
    num_envs_per_worker: int = key(1, integer(1))
    # Host envs' worker processes (jaxdqn.hostenv): one that fails is started again (the fragment
    # it was in is lost), up to the tolerance of consecutive failures; else the run stops.
    recreate_failed_workers: bool = key(False, boolean, resumable=True)
    num_consecutive_worker_failures_tolerance: int = key(100, integer(0), resumable=True)
    timesteps_per_iteration: int = key(1000, integer(0), resumable=True, rllib=(
        "min_sample_timesteps_per_reporting", "min_sample_timesteps_per_iteration"))
    evaluation_num_episodes: int = key(10, integer(1), resumable=True)
    evaluation_interval: int | None = key(None, optional(integer(1)), resumable=True)  # every N train() calls
    evaluation_config: EvaluationConfig = key(check=nested(EvaluationConfig, "unsupported evaluation_config key "
                                              "(evaluation runs the training env and config)"), factory=EvaluationConfig)
    explore: bool = key(True, boolean)  # False: training rollouts act greedily (no epsilon, no noise)
    clip_rewards: bool | float | tuple[float, float] | None = key(None, clip_rewards)
    no_done_at_end: bool = key(False, boolean)  # True: episode ends bootstrap, as a truncation does
    # False: a truncation (an episode cap) ends the return as a termination does, RLlib 1.x's
    # treatment of gym's TimeLimit done; True bootstraps from the state the cap cut off.
    bootstrap_truncations: bool = key(True, boolean)
    metrics_smoothing_episodes: int = key(100, integer(1), rllib=("metrics_num_episodes_for_smoothing",))
    min_iter_time_s: float = key(0.0, number(0.0), resumable=True, rllib=(
        "min_time_s_per_reporting", "min_time_s_per_iteration"))
    model: ModelConfig = key(check=nested(ModelConfig), factory=ModelConfig, policy=True)
    exploration_config: ExplorationConfig = key(check=nested(ExplorationConfig), factory=ExplorationConfig)
    optimizer: OptimizerConfig = key(check=nested(OptimizerConfig), factory=OptimizerConfig)
    # --- SimpleQ / DQN keys ---
    adam_epsilon: float = key(1e-8, number(0.0, open_low=True), traced=True, policy=True)
    grad_clip: float | None = key(40.0, optional(number(0.0, open_low=True)), traced=True, policy=True)
    grad_clip_mode: GradClipMode = key("global_norm", one_of(GradClipMode))  # RLlib torch's / tf's clipping
    buffer_size: int = key(50_000, integer(1, 2**30 - 1))
    learning_starts: int = key(1000, integer(0))
    target_network_update_freq: int = key(500, integer(0), traced=True, policy=True)
    tau: float = key(1.0, number(0.0, 1.0, open_low=True), traced=True, policy=True)
    prioritized_replay: bool = key(True, boolean)
    prioritized_replay_alpha: float = key(0.6, number(0.0), traced=True)
    prioritized_replay_beta: float = key(0.4, number(0.0, 1.0), traced=True)
    final_prioritized_replay_beta: float = key(0.4, number(0.0, 1.0), traced=True)
    prioritized_replay_beta_annealing_timesteps: int = key(20_000, integer(0), traced=True)
    prioritized_replay_eps: float = key(1e-6, number(0.0, open_low=True), traced=True)
    n_step: int = key(1, integer(1, MAX_N_STEP))
    double_q: bool = key(True, boolean, policy=True)
    dueling: bool = key(True, boolean, policy=True)
    hiddens: tuple[int, ...] = key((256,), positive_ints, policy=True)
    num_atoms: int = key(1, integer(1), policy=True)
    v_min: float = key(-10.0, number(-math.inf), policy=True)
    v_max: float = key(10.0, number(-math.inf), policy=True)
    noisy: bool = key(False, boolean, policy=True)
    sigma0: float = key(0.5, number(0.0, open_low=True), policy=True)
    training_intensity: float | None = key(None, optional(number(0.0, open_low=True)))
    replay_sequence_length: int = key(1, integer(1))
    burn_in: int = key(0, integer(0))
    zero_init_states: bool = key(True, boolean)
    # R2D2's value rescaling: targets h(r + discount * h^-1(Q_target)), h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x
    use_h_function: bool = key(False, boolean, policy=True)
    h_function_epsilon: float = key(1e-3, number(0.0, open_low=True), policy=True)
    # None: single-agent (or one shared policy on a multi-agent env)
    multiagent: MultiAgentConfig | None = key(None, optional(nested(MultiAgentConfig)))

    def __post_init__(self) -> None:
        check_fields(self)
        # RLlib DQN's validate_config: a fragment holds at least one n-step window.
        object.__setattr__(self, "rollout_fragment_length", max(self.rollout_fragment_length, self.n_step))
        self.check_learner()
        self.check_sequences()
        self.check_multiagent()

    def check_learner(self) -> None:
        if self.training_intensity is not None:
            per_step = self.training_intensity / (self.train_batch_size * self.sequence_length)
            if per_step > MAX_SGD_PER_STEP:
                fail("training_intensity", self.training_intensity,
                     f"asks for {per_step:g} SGD steps per env step with train_batch_size={self.train_batch_size}"
                     f"{f' x sequence length {self.sequence_length}' if self.sequence_length > 1 else ''}; "
                     f"at most {MAX_SGD_PER_STEP} (training_intensity <= "
                     f"{MAX_SGD_PER_STEP * self.train_batch_size * self.sequence_length})")
        if self.optimizer.type != "adam" and self.adam_epsilon != DQNConfig.adam_epsilon:
            fail("adam_epsilon", self.adam_epsilon, f"applies to Adam only; optimizer type is "
                 f"{self.optimizer.type!r} (set optimizer.epsilon)")
        if self.use_h_function and self.num_atoms > 1:
            fail("use_h_function", True, "rescales scalar Q targets (R2D2's); must be False with num_atoms > 1")
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            fail("v_min", self.v_min, f"must be < v_max={self.v_max} when num_atoms > 1")
        if self.no_done_at_end and not self.bootstrap_truncations:
            fail("bootstrap_truncations", False, "contradicts no_done_at_end=True (that bootstraps at every "
                 "episode end, this at none); set one of them")

    def check_sequences(self) -> None:
        """Sequence replay (``model.use_lstm``): RLlib R2D2's keys."""
        if self.burn_in >= self.sequence_length:
            fail("burn_in", self.burn_in, f"must be < the sequence length {self.sequence_length} "
                 f"(replay_sequence_length, or model.max_seq_len + burn_in when it is 1) so that a "
                 f"sequence trains on at least one step")
        if self.burn_in and not self.model.use_lstm:
            fail("burn_in", self.burn_in, "must be 0 unless model.use_lstm=True (burn-in warms up a recurrent state)")
        if self.replay_sequence_length > 1 and not self.model.use_lstm:
            fail("replay_sequence_length", self.replay_sequence_length,
                 "must be 1 unless model.use_lstm=True (sequences are for recurrent Q-networks)")
        if self.model.use_lstm and self.num_atoms > 1:
            fail("num_atoms", self.num_atoms, "must be 1 with model.use_lstm=True (recurrent C51 is not supported)")

    def check_multiagent(self) -> None:
        multi = self.multiagent
        if multi is None:
            return
        if multi.replay_mode == "lockstep" and self.prioritized_replay:
            fail("multiagent.replay_mode", "lockstep", "does not support prioritized replay (as in RLlib): "
                 "set prioritized_replay=False or replay_mode='independent'")
        if self.model.use_lstm:
            fail("model.use_lstm", True, "recurrent multi-agent policies are not supported; "
                 "remove the multiagent section or the LSTM")
        allowed = classified(DQNConfig, "policy")
        for pid, overrides in multi.policies:
            for name, value in overrides:
                if name not in allowed:
                    fail(f"multiagent.policies.{pid}.{name}", value, f"a policy may override only {list(allowed)}")
            model = dict(overrides).get("model") or {}
            if (model.use_lstm if isinstance(model, ModelConfig) else dict(model).get("use_lstm")):
                fail(f"multiagent.policies.{pid}.model.use_lstm", True, "recurrent multi-agent policies are not "
                     "supported")

    # --- derived values and the views components take ----------------------------------------
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
    def num_envs(self) -> int:
        """Environments stepped in parallel: RLlib's workers multiply the per-worker envs."""
        return self.num_envs_per_worker * max(1, self.num_workers)

    @property
    def head(self) -> QHeadConfig:
        """The Q head's keys as the sub-config ``networks.QNetwork`` takes."""
        return view(self, QHeadConfig)

    @property
    def loss(self) -> LossConfig:
        """The TD loss's static keys as the sub-config ``learner`` takes."""
        return LossConfig(double_q=self.double_q, td_error_loss_fn=self.td_error_loss_fn, n_step=self.n_step,
                          burn_in=self.burn_in, recurrent=self.model.use_lstm,
                          h_function_epsilon=self.h_function_epsilon if self.use_h_function else None)

    @property
    def hyperparams(self) -> Hyperparams:
        """The config's traced-capable numbers (``Hyperparams``) as Python numbers."""
        top = {name: getattr(self, name) for name in classified(DQNConfig, "traced")}
        explore = {name: getattr(self.exploration_config, name) for name in classified(ExplorationConfig, "traced")}
        return Hyperparams(**top, **explore)

    def for_policy(self, overrides: tuple[tuple[str, Any], ...]) -> "DQNConfig":
        """The config of one policy of ``multiagent.policies``: the run's, with its overrides
        (``model`` merged key by key)."""
        changes = dict(overrides)
        if "model" in changes and not isinstance(changes["model"], ModelConfig):
            changes["model"] = ModelConfig(**{**dataclasses.asdict(self.model), **dict(changes["model"])})
        return dataclasses.replace(self, multiagent=None, **changes)

    def replace(self, **changes: Any) -> "DQNConfig":
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)


def view(config: Any, cls: type) -> Any:
    """The view ``cls`` of ``config``: its fields taken from ``config``'s of the same names."""
    return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class SimpleQConfig(DQNConfig):
    """RLlib 1.x's SimpleQ: DQN without double Q, dueling, n-step, prioritized replay, C51 or noisy
    nets, whose policy applies no gradient clipping and no learning-rate schedule (a plain Adam
    at ``lr``), copies its target network whole (no ``tau``), and whose execution plan alternates
    one store and one replay (no ``training_intensity``: the replay ratio is the native
    ``train_batch_size / (rollout_fragment_length * num_envs)``). Those keys are refused rather
    than ignored."""

    prioritized_replay: bool = redefault(DQNConfig, "prioritized_replay", False)
    double_q: bool = redefault(DQNConfig, "double_q", False)
    dueling: bool = redefault(DQNConfig, "dueling", False)
    hiddens: tuple[int, ...] = redefault(DQNConfig, "hiddens", ())
    grad_clip: float | None = redefault(DQNConfig, "grad_clip", None)

    def __post_init__(self) -> None:
        super().__post_init__()
        off = {"double_q": False, "dueling": False, "prioritized_replay": False, "noisy": False,
               "n_step": 1, "num_atoms": 1, "use_h_function": False}
        for name, value in off.items():
            if getattr(self, name) != value:
                fail(name, getattr(self, name), f"SimpleQ requires {name}={value!r}; use DQNConfig for it")
        plain = {"grad_clip": (None, "RLlib's SimpleQ policy never clips gradients"),
                 "lr_schedule": (None, "RLlib's SimpleQ policy has no learning-rate schedule"),
                 "training_intensity": (None, "RLlib's SimpleQ plan alternates one store and one replay "
                                              "(set rollout_fragment_length / train_batch_size instead)"),
                 "adam_epsilon": (1e-8, "RLlib's SimpleQ policy uses Adam's default epsilon"),
                 "tau": (1.0, "RLlib's SimpleQ policy copies the target network whole")}
        for name, (value, why) in plain.items():
            if getattr(self, name) != value:
                fail(name, getattr(self, name), f"SimpleQ requires {name}={value!r}: {why}; use DQNConfig for it")


# The sub-configs: nested mappings in files, dotted keys (``model.fcnet_hiddens``) in sweeps.
NESTED: dict[str, type] = {"model": ModelConfig, "exploration_config": ExplorationConfig,
                           "evaluation_config": EvaluationConfig, "optimizer": OptimizerConfig}
ALGOS: dict[str, type] = {"dqn": DQNConfig, "simple_q": SimpleQConfig}
RLLIB_RUN_NAMES = {"DQN": "dqn", "SimpleQ": "simple_q", "dqn": "dqn", "simple_q": "simple_q"}


def traced_keys() -> tuple[str, ...]:
    """The dotted keys a plan may take traced (``Hyperparams``)."""
    return classified(DQNConfig, "traced") + tuple(f"exploration_config.{k}"
                                                   for k in classified(ExplorationConfig, "traced"))


def algo_of(config: DQNConfig) -> str:
    """``"dqn"`` or ``"simple_q"``."""
    return "simple_q" if isinstance(config, SimpleQConfig) else "dqn"


def config_class(algo: str) -> type:
    """The config class of an algorithm name (ours, or RLlib's ``run:`` value)."""
    if algo not in RLLIB_RUN_NAMES:
        fail("algo", algo, f"supported: {sorted(ALGOS)} (RLlib's 'DQN', 'SimpleQ' also accepted)")
    return ALGOS[RLLIB_RUN_NAMES[algo]]


def plain(x: Any) -> Any:
    """Tuples (and dataclasses) as lists and dicts: JSON / YAML data."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = dataclasses.asdict(x)
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def to_dict(config: DQNConfig) -> dict[str, Any]:
    """Our keys as plain JSON / YAML data (tuples become lists, env_params a mapping)."""
    if not isinstance(config.env, str):
        raise ValueError(f"env={config.env!r} is an object: configs are written with environment names; "
                         f"add it to jaxdqn.multiagent.REGISTRY under a name")
    out = plain(config)
    out["env_params"] = {k: v for k, v in config.env_params}
    multi = config.multiagent
    if multi is not None:
        if callable(multi.policy_mapping_fn):
            raise ValueError("multiagent.policy_mapping_fn is a callable: resolve it to a mapping first "
                             "(the Trainer does; see MultiAgentConfig.policy_of)")
        out["multiagent"] = {
            "policies": {pid: {k: plain(v) for k, v in overrides} for pid, overrides in multi.policies},
            "policy_mapping_fn": dict(multi.policy_mapping_fn) if multi.policy_mapping_fn else None,
            "policies_to_train": plain(multi.policies_to_train),
            "replay_mode": multi.replay_mode,
        }
    return out


def from_dict(data: Mapping[str, Any], algo: str = "dqn") -> DQNConfig:
    """The inverse of ``to_dict`` (any subset of our keys; the rest keep their defaults).

    An unknown key, top-level or nested, raises ``ValueError`` with a did-you-mean hint."""
    cls = config_class(algo)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name not in names:
            unknown_key(name, names)
        kwargs[name] = section(name, value, NESTED[name]) if name in NESTED and isinstance(value, Mapping) else value
    return cls(**kwargs)
