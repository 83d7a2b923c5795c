"""RLlib's nested config sections (``model``, ``exploration_config``, ``optimizer``,
``evaluation_config``, ``multiagent``) and the views of flat keys that components take
(``QHeadConfig``, ``LossConfig``): frozen, hashable, checked when built."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping

from jaxdqn.config.fields import boolean, check_fields, fail, integer, key, number, one_of, positive_ints

Activation = Literal["tanh", "relu", "elu", "swish", "silu", "gelu", "linear"]
ExplorationType = Literal["EpsilonGreedy"]
LossFn = Literal["huber", "mse"]
OptimizerType = Literal["adam", "rmsprop"]
ReplayMode = Literal["independent", "lockstep"]


@dataclasses.dataclass(frozen=True)
class ExplorationConfig:
    """RLlib's ``exploration_config``: epsilon-greedy, linear from ``initial`` to ``final``."""

    type: ExplorationType = key("EpsilonGreedy", one_of(ExplorationType, " (noisy nets explore with noisy=True)"))
    initial_epsilon: float = key(1.0, number(0.0, 1.0), traced=True)
    final_epsilon: float = key(0.02, number(0.0, 1.0), traced=True)
    epsilon_timesteps: int = key(10_000, integer(0), traced=True)

    def __post_init__(self) -> None:
        check_fields(self, "exploration_config.")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """RLlib's ``optimizer`` dict ("arguments to pass to the policy optimizer"; empty there, and
    here: Adam with ``lr`` / ``adam_epsilon``). ``type="rmsprop"`` is RMSProp as PyTorch computes
    it (the MinAtar and DQN-Zoo-style references): ``v = decay v + (1 - decay) g^2``, centred
    (``v - m^2``, ``m`` the mean gradient) when ``centered``, step ``lr g / (sqrt(v) + epsilon)``.
    ``lr``, ``lr_schedule`` and ``grad_clip`` apply to both."""

    type: OptimizerType = key("adam", one_of(OptimizerType))
    decay: float = key(0.95, number(0.0, 1.0))  # rmsprop: the squared-gradient (and mean-gradient) average's decay
    epsilon: float = key(0.01, number(0.0, open_low=True))  # rmsprop: added to the root, as PyTorch's eps
    centered: bool = key(True, boolean)  # rmsprop

    def __post_init__(self) -> None:
        check_fields(self, "optimizer.")
        if self.type == "adam":
            for field in dataclasses.fields(self)[1:]:
                if getattr(self, field.name) != field.default:
                    fail(f"optimizer.{field.name}", getattr(self, field.name), "applies to optimizer type 'rmsprop' "
                         "only (Adam's epsilon is adam_epsilon)")


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """RLlib's ``evaluation_config`` overrides; only ``explore`` changes an evaluation here.

    DQN's and SimpleQ's RLlib default is ``explore=False`` (greedy evaluation); ``True`` acts
    epsilon-greedily at the training run's current epsilon (and with noise for noisy nets)."""

    explore: bool = key(False, boolean)

    def __post_init__(self) -> None:
        check_fields(self, "evaluation_config.")


def conv_filters(key_: str, value: Any) -> tuple[tuple[int, int, int], ...] | None:
    """RLlib's ``[[out_channels, kernel, stride], ...]`` (a kernel may be ``[k, k]``)."""
    if value is None:
        return None
    filters = []
    for f in value:
        try:
            out, kernel, stride = f
            kernel = kernel[0] if isinstance(kernel, (list, tuple)) else kernel
            filters.append((int(out), int(kernel), int(stride)))
        except (TypeError, ValueError):
            fail(key_, value, "must be [[out_channels, kernel, stride], ...]")
    if not filters or any(min(f) < 1 for f in filters):
        fail(key_, value, "must be a non-empty list of positive triples")
    return tuple(filters)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """RLlib's ``model`` dict: the fully connected torso, a conv torso, an optional LSTM."""

    fcnet_hiddens: tuple[int, ...] = key((256, 256), positive_ints)
    fcnet_activation: Activation = key("tanh", one_of(Activation))
    # RLlib's [[out_channels, kernel, stride], ...]; None picks one from the observation shape.
    conv_filters: tuple[tuple[int, int, int], ...] | None = key(None, conv_filters)
    conv_activation: Activation = key("relu", one_of(Activation))
    use_lstm: bool = key(False, boolean)
    lstm_cell_size: int = key(256, integer(1))
    max_seq_len: int = key(20, integer(1))

    def __post_init__(self) -> None:
        check_fields(self, "model.")


@dataclasses.dataclass(frozen=True)
class QHeadConfig:
    """The Q head above the model's torso, a view of RLlib's flat DQN keys (``DQNConfig.head``):
    what ``networks.QNetwork`` needs besides the ``ModelConfig``."""

    hiddens: tuple[int, ...] = (256,)
    dueling: bool = True
    num_atoms: int = 1
    v_min: float = -10.0
    v_max: float = 10.0
    noisy: bool = False
    sigma0: float = 0.5


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """What the TD loss is, a view of flat keys (``DQNConfig.loss``): the learner's static choices
    (its numbers, such as ``gamma``, are ``Hyperparams``)."""

    double_q: bool = True
    td_error_loss_fn: LossFn = "huber"
    n_step: int = 1  # sequences: the loss sums n-step returns inside each slice
    burn_in: int = 0  # sequences: steps that only warm up the recurrent state
    recurrent: bool = False  # items are sequences (model.use_lstm)
    h_function_epsilon: float | None = None  # R2D2's value rescaling of the targets (None: off)


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig:
    """RLlib's ``multiagent`` dict.

    ``policies``: policy ids, or a mapping id -> per-policy overrides (``None``, a dict, or
    RLlib's ``(policy_cls, obs_space, act_space, config)`` tuple whose config is used), stored
    as ``((id, ((key, value), ...)), ...)``; ``DQNConfig`` checks the overridden keys (its
    ``policy`` keys). ``policy_mapping_fn``: agent id -> policy id, a mapping or a Python
    callable (resolved once against the env's agents when the plan is built: the mapping is
    static). ``policies_to_train``: the policies that learn (all when ``None``).
    ``replay_mode``: ``"independent"`` (one buffer per policy, each samples its own batch) or
    ``"lockstep"`` (one buffer of joint steps, all policies replay the same steps; uniform only).
    """

    policies: Any = ("default_policy",)
    policy_mapping_fn: Any = None  # None: every agent -> the only policy
    policies_to_train: tuple[str, ...] | None = None
    replay_mode: ReplayMode = key("independent", one_of(ReplayMode))

    def __post_init__(self) -> None:
        check_fields(self, "multiagent.")
        object.__setattr__(self, "policies", policy_entries(self.policies))
        ids = list(self.policy_ids)
        mapping = self.policy_mapping_fn
        if mapping is None and len(ids) > 1:
            fail("multiagent.policy_mapping_fn", None, f"is required with several policies {ids}")
        if isinstance(mapping, (Mapping, tuple, list)):
            mapping = tuple(sorted((str(a), str(p)) for a, p in dict(mapping).items()))
            bad = sorted({p for _, p in mapping} - set(ids))
            if bad:
                fail("multiagent.policy_mapping_fn", dict(mapping), f"maps to unknown policies {bad}; policies: {ids}")
            object.__setattr__(self, "policy_mapping_fn", mapping)
        elif mapping is not None and not callable(mapping):
            fail("multiagent.policy_mapping_fn", mapping, "must be a mapping agent id -> policy id, or a callable")
        if self.policies_to_train is not None:
            train = tuple(str(p) for p in self.policies_to_train)
            if not set(train) <= set(ids):
                fail("multiagent.policies_to_train", list(train), f"must be a subset of the policies {ids}")
            object.__setattr__(self, "policies_to_train", train)

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(pid for pid, _ in self.policies)

    @property
    def trained(self) -> tuple[str, ...]:
        """The policies that learn, in the order of ``policies``."""
        train = self.policies_to_train
        return self.policy_ids if train is None else tuple(p for p in self.policy_ids if p in train)

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
                fail("multiagent.policy_mapping_fn", dict(mapping), f"does not map the agents {missing}")
            out = {agent: out[agent] for agent in agents}
        bad = {a: p for a, p in out.items() if p not in self.policy_ids}
        if bad:
            fail("multiagent.policy_mapping_fn", bad, f"maps to unknown policies; policies: {list(self.policy_ids)}")
        return out


def policy_entries(policies: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    """``multiagent.policies`` as ``((id, ((key, value), ...)), ...)``, overrides sorted by key."""
    if isinstance(policies, Mapping):
        policies = list(policies.items())
    entries = []
    for entry in policies or ():
        pid, overrides = (entry, None) if isinstance(entry, str) else tuple(entry)
        if isinstance(overrides, (tuple, list)) and len(overrides) == 4 and not isinstance(overrides[0], (tuple, list)):
            overrides = overrides[3]  # RLlib's (policy_cls, obs_space, act_space, config)
        entries.append((str(pid), tuple(sorted(dict(overrides or {}).items()))))
    if not entries:
        fail("multiagent.policies", policies, "must name at least one policy")
    ids = [pid for pid, _ in entries]
    if len(set(ids)) != len(ids):
        fail("multiagent.policies", ids, "must not repeat a policy id")
    return tuple(entries)
