"""Devices and processes: the only module that knows about ``pmap``, device axes and hosts.

The Anakin layout (Hessel et al. 2021, "Podracer architectures"): the whole execution plan runs
on every device. ``make_runner(config, num_seeds)`` picks one of three layouts:

* **one device** (``num_devices=1``): the plan jitted, seeds stacked with ``vmap``; leaves
  ``[...]`` or ``[S, ...]``.
* **data parallel** (``num_devices=D > 1``, no seeds): the plan ``pmap``ped over ``AXIS``. The
  totals ``num_envs``, ``buffer_size`` and ``train_batch_size`` are split evenly, so each device
  steps its own envs into its own replay shard and replays its part of the batch; gradients and
  learner statistics are ``pmean``ed, so params, target and counters stay identical on every
  device; priorities stay with their shard; episode metrics are gathered. Leaves ``[D, ...]``.
  RLlib's ``MultiGPUTrainOneStep`` splits one batch over towers the same way.
* **seeds on devices** (``num_devices=D``, ``num_seeds=S``, ``S % D == 0``): each device trains
  ``S / D`` whole, independent seeds with ``vmap``; there are no collectives (seeds never share
  anything). Leaves ``[D, S / D, ...]``; the results are those of ``S`` seeds on one device.

More than one process (``jax.distributed``, see ``initialize``): the same program on every
process; ``num_devices`` counts the devices of all processes (it must be all of them), each
process holds and runs the rows of its own devices, and ``to_host`` gathers the global state (for
a checkpoint) on every process. Starting the processes, and forcing CPU devices (RLlib's
``_fake_gpus``), is the shell's ``jaxdqn.distributed``.

Every layout problem (more devices than visible, totals or seeds that the device count does not
divide) raises a ``ValueError`` naming the key, before anything compiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from jaxdqn._platform import key_dtype
from jaxdqn.config import DQNConfig

if TYPE_CHECKING:
    from jaxdqn.plan import BatchHook, Plan

# The plan is imported inside the functions that need it: importing gymnax creates arrays, which
# starts JAX's backends, and force_host_devices / initialize must run before that.

AXIS = "devices"
RUNS = "runs"  # the vmapped runs' axis (seeds, a sweep's trials x seeds): they step in lockstep


class Layout(NamedTuple):
    """Where a run lives (static)."""

    num_devices: int  # devices of all processes that run the plan
    num_local_devices: int  # of this process
    process_index: int
    num_processes: int
    num_seeds: int | None  # runs vmapped: the seeds, or trials x seeds in a sweep
    num_trials: int = 1  # a sweep's trials (``jaxdqn.sweep``): run ``r`` is trial ``r // (num_seeds / num_trials)``

    @property
    def data_parallel(self) -> bool:
        return self.num_devices > 1 and self.num_seeds is None

    @property
    def seeds_per_device(self) -> int:
        return 1 if self.num_seeds is None else self.num_seeds // self.num_devices

    @property
    def leading_shape(self) -> tuple[int, ...]:
        """The leading axes of every state leaf, over all processes."""
        if self.num_devices == 1:
            return () if self.num_seeds is None else (self.num_seeds,)
        return (self.num_devices,) if self.num_seeds is None else (self.num_devices, self.seeds_per_device)

    def describe(self) -> str:
        hosts = f" over {self.num_processes} processes" if self.num_processes > 1 else ""
        runs = "seeds"
        if self.num_trials > 1:
            runs = f"runs ({self.num_trials} trials x {self.num_seeds // self.num_trials} seeds)"
        if self.num_devices == 1:
            return "1 device" + (f", {self.num_seeds} vmapped {runs}" if self.num_seeds else "")
        if self.num_seeds is None:
            return f"{self.num_devices} devices{hosts}, data parallel (pmean)"
        return f"{self.num_devices} devices{hosts}, {self.seeds_per_device} vmapped {runs} per device"


def resolve_num_devices(config: DQNConfig) -> int:
    """``config.num_devices`` as a count (``"auto"``: every device of every process), checked
    against what JAX sees."""
    visible = jax.device_count()
    if config.num_devices == "auto":
        return visible
    wanted = config.num_devices
    if wanted > visible:
        platform = jax.devices()[0].platform
        hint = (f"; on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={wanted} before "
                "starting Python (RLlib's _fake_gpus)" if platform == "cpu" else "")
        raise ValueError(f"num_devices={wanted} is invalid: only {visible} {platform} device(s) are "
                         f"visible{hint}")
    if jax.process_count() > 1 and wanted != visible:
        raise ValueError(f"num_devices={wanted} is invalid with {jax.process_count()} processes: a "
                         f"multi-process run uses every device ({visible}); set num_devices='auto'")
    return wanted


def make_layout(config: DQNConfig, num_seeds: int | None, num_trials: int = 1) -> Layout:
    """The layout of ``config`` with ``num_seeds`` vmapped runs (``num_trials`` trials of a sweep
    among them); every refusal is a ``ValueError``."""
    devices = resolve_num_devices(config)
    if num_seeds is not None and num_seeds % devices:
        if num_trials > 1:
            raise ValueError(f"{num_trials} trials x {num_seeds // num_trials} seeds = {num_seeds} runs is invalid "
                             f"with num_devices={devices}: runs are spread evenly over the devices; make "
                             f"trials x seeds a multiple of {devices}")
        raise ValueError(f"num_seeds={num_seeds} is invalid with num_devices={devices}: seeds are "
                         f"spread evenly over the devices; use a multiple of {devices}")
    if num_seeds is None:
        from jaxdqn.plan import split_totals

        split_totals(config, devices)  # raises for a total that does not divide
    local = devices // jax.process_count()
    return Layout(num_devices=devices, num_local_devices=local, process_index=jax.process_index(),
                  num_processes=jax.process_count(), num_seeds=num_seeds, num_trials=num_trials)


def _local_devices(layout: Layout) -> list[Any]:
    return jax.local_devices()[:layout.num_local_devices]


def is_key(x: Any) -> bool:
    """Whether ``x`` (an array or ``ShapeDtypeStruct``) holds typed PRNG keys."""
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox4x32")  # JAX's own PRNG implementations


def key_impl(x: Any) -> str:
    """The name of the PRNG implementation of typed keys ``x`` (an array or ``ShapeDtypeStruct``),
    as ``wrap_key_data(impl=...)`` takes it and a checkpoint records it."""
    for name in KEY_IMPLS:
        if key_dtype(name) == x.dtype:
            return name
    raise ValueError(f"keys of dtype {x.dtype} are not of one of JAX's implementations {list(KEY_IMPLS)}")


def layout_keys(seed: int | Sequence[int], num_devices: int, num_seeds: int | None) -> jax.Array:
    """The global init keys of a layout: ``[]``, ``[S]``, ``[D]`` (one key, the same on every
    device: one run) or ``[D, S/D]``. Seed ``k`` of ``S`` is ``split(key(seed), S)[k]`` in every
    layout, and one run is seed 0 (``split(key(seed), 1)[0]``: jax's split draws key ``k`` the
    same for any count), so seed 0 of a vmapped run is the single run, bit for bit.

    A sweep passes one ``seed`` per trial and ``num_seeds = trials x seeds`` runs: trial ``t``'s
    seed ``k`` is ``split(key(seed[t]), seeds)[k]``, as in a run of that trial alone."""
    if not isinstance(seed, int):
        per_trial = num_seeds // len(seed)
        keys = jax.numpy.concatenate([jax.random.split(jax.random.key(s), per_trial) for s in seed])
        return keys if num_devices == 1 else keys.reshape(num_devices, num_seeds // num_devices)
    key = jax.random.key(seed)
    if num_seeds is None:
        key = jax.random.split(key, 1)[0]
    if num_devices == 1:
        return key if num_seeds is None else jax.random.split(key, num_seeds)
    if num_seeds is None:
        return jax.numpy.stack([key] * num_devices)
    return jax.random.split(key, num_seeds).reshape(num_devices, num_seeds // num_devices)


class Runner(NamedTuple):
    """A plan bound to a layout: compiled entry points and the host/device conversions.

    ``init()`` is the state of ``config.seed`` (seed ``k`` of ``S`` is
    ``jax.random.split(key(seed), S)[k]`` in every layout); ``chunk(state)`` is donated;
    ``template()`` is the global state's shapes; ``report_to_host`` gives scalars (one run) or
    arrays ``[S]`` (seeds), the same over all processes; ``to_host`` / ``to_device`` convert between this process's state and the global
    state (leaves ``layout.leading_shape + ...``) that checkpoints hold; ``unreplicate`` gives a
    tree of params with the leading axes of one run (``[]``) or of the seeds (``[S]``)."""

    layout: Layout
    plan: "Plan"
    init: Callable[[], Any]
    chunk: Callable[[Any], tuple[Any, dict[str, Any]]]
    template: Callable[[], Any]
    report_to_host: Callable[[dict[str, Any]], dict[str, Any]]
    to_host: Callable[[Any], Any]
    to_device: Callable[[Any], Any]
    unreplicate: Callable[[Any], Any]
    replicate: Callable[[Any], Any]
    trial_values: dict[str, np.ndarray]  # a sweep's traced keys: ``[R]`` per key, one row per run ({} if none)
    evaluate: Callable[..., Any] | None = None  # host envs' evaluation (params, key, eps); None: the plan's, jitted


def make_plan(config: DQNConfig, **kwargs: Any) -> "Plan":
    """``plan.make_plan`` (imported here, not at the top: importing gymnax starts JAX's backends)."""
    from jaxdqn import plan

    return plan.make_plan(config, **kwargs)


def global_template(config: DQNConfig, num_devices: int, num_seeds: int | None, plan: "Plan | None" = None, *,
                    spec: Any = None) -> Any:
    """The shapes and dtypes of the global state of ``config`` laid out over ``num_devices``
    (a ``vmap`` with the device axis name stands in for ``pmap``: no devices are needed).
    ``plan``: the layout's plan when one is built already (else one is made: an ALE batch each;
    ``spec``: the env's where the shell made it, as ``make_runner``'s)."""
    keys = layout_keys(config.seed, num_devices, num_seeds)
    data_parallel = num_devices > 1 and num_seeds is None
    if plan is None:
        plan = (make_plan(config, axis_name=AXIS, num_replicas=num_devices) if data_parallel
                else make_plan(config, spec=spec, num_runs=num_seeds if num_devices == 1 and num_seeds else 1))
    if num_devices == 1:
        return jax.eval_shape(plan.start if num_seeds is None else jax.vmap(plan.start), keys)
    if data_parallel:
        return jax.eval_shape(jax.vmap(plan.start, axis_name=AXIS), keys)
    return jax.eval_shape(jax.vmap(jax.vmap(plan.start)), keys)


def unreplicate_global(tree: Any, num_devices: int, num_seeds: int | None) -> Any:
    """A global tree of a layout -> one copy per run (leaves ``[...]`` or ``[S, ...]``): the first
    device's copy when data parallel (the copies are equal), the seeds in order otherwise."""
    if num_devices == 1:
        return tree
    if num_seeds is None:
        return jax.tree_util.tree_map(lambda x: x[0], tree)
    return jax.tree_util.tree_map(lambda x: x.reshape((num_seeds,) + x.shape[2:]), tree)


def make_runner(config: DQNConfig, num_seeds: int | None = None, *,
                before_learn_on_batch: "BatchHook | None" = None,
                trials: Sequence[DQNConfig] | None = None, spec: Any = None) -> Runner:
    """The ``Runner`` of ``config`` on the layout that ``config.num_devices`` and ``num_seeds``
    give (see the module docstring); ``spec``: the env's spec where the shell made it (an env
    that steps on the host: one run on one device).

    ``trials``: a sweep's configs, differing from each other only in ``sweep.TRACED_KEYS`` and
    ``seed`` (``config`` is one of them: its static parts build the program). They run as
    ``R = trials x seeds`` vmapped runs (``num_seeds`` None counts as 1), run ``r`` being seed
    ``r % S`` of trial ``r // S``, each reading its trial's values (``Hyperparams`` beside the
    static config) from a ``[R]`` array."""
    from jaxdqn import atari, sweep

    num_trials = 1 if trials is None else len(trials)
    runs = num_seeds if trials is None else num_trials * (num_seeds or 1)
    values = {} if trials is None else sweep.trial_values(trials)
    run_values = {k: np.repeat(v, runs // num_trials) for k, v in values.items()}  # [R]
    layout = make_layout(config, runs, num_trials)
    if runs is not None and layout.num_devices > 1 and atari.is_atari(config.env):
        raise ValueError(f"env={config.env!r} is one ALE batch of games (its state lives in the emulator): its "
                         f"seeds and trials run on one device (num_devices=1, not {config.num_devices})")
    D, S = layout.num_devices, runs
    build = dict(before_learn_on_batch=before_learn_on_batch, spec=spec, runs_axis=RUNS if S is not None else None,
                 num_runs=S or 1)
    if layout.data_parallel:
        plan = make_plan(config, before_learn_on_batch=before_learn_on_batch, axis_name=AXIS, num_replicas=D,
                         spec=spec)
    else:
        plan = make_plan(config, **build)
        if atari.is_atari(config.env):  # one ALE batch: every trial's plan plays the same games
            build["spec"] = plan.spec
    if values:  # a sweep: the plan of each run's trial, built from its traced values
        def traced(v: dict[str, Any]) -> "Plan":
            return make_plan(config, hyper=sweep.hyperparams(config, v), **build)

        init_one = lambda key, v: traced(v).start(key)  # noqa: E731
        chunk_one = lambda state, v: traced(v).chunk(state)  # noqa: E731
    else:
        init_one = lambda key, v: plan.start(key)  # noqa: E731
        chunk_one = lambda state, v: plan.chunk(state)  # noqa: E731
    host = HostSide.of(layout)
    rows = lambda x: x if D == 1 else x.reshape((D, S // D))  # noqa: E731
    host_values = {k: rows(v) for k, v in run_values.items()}
    stacked = (lambda f: jax.vmap(f, axis_name=RUNS)) if S is not None else (lambda f: f)
    if D == 1:
        init_fn, chunk_fn = jax.jit(stacked(init_one)), jax.jit(stacked(chunk_one), donate_argnums=0)
    else:
        # One process: the first D devices. Several: pmap's default, every device of every process
        # (``devices=`` would confine the axis, and its collectives, to this process's devices).
        pmap = dict(axis_name=AXIS, devices=host.devices if layout.num_processes == 1 else None)
        init_fn = jax.pmap(stacked(init_one), **pmap)
        chunk_fn = jax.pmap(stacked(chunk_one), donate_argnums=0, **pmap)
    device_values = host.to_device(host_values)
    seeds = config.seed if trials is None else [t.seed for t in trials]
    return Runner(layout=layout, plan=plan, init=lambda: init_fn(host.mine(layout_keys(seeds, D, S)), device_values),
                  chunk=lambda state: chunk_fn(state, device_values),
                  template=lambda: global_template(config, D, S, plan), report_to_host=host.report_to_host,
                  to_host=host.to_host, to_device=host.to_device, unreplicate=host.unreplicate,
                  replicate=host.replicate, trial_values=run_values)


class HostSide(NamedTuple):
    """How this process's arrays of a layout move between the host and its devices."""

    layout: Layout
    devices: list[Any]  # this process's devices of the layout
    sharding: Any  # row i of a leaf on local device i: the sharding that pmap's own outputs have
    first: int  # this process's first row of the global state

    @classmethod
    def of(cls, layout: Layout) -> "HostSide":
        local = _local_devices(layout)
        sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(local), (AXIS,)),
                                              jax.sharding.PartitionSpec(AXIS))
        return cls(layout=layout, devices=local, sharding=sharding,
                   first=layout.process_index * layout.num_local_devices)

    def mine(self, tree: Any) -> Any:
        """This process's rows of a global tree (all of it on one device)."""
        if self.layout.num_devices == 1:
            return tree
        return jax.tree_util.tree_map(lambda x: x[self.first:self.first + self.layout.num_local_devices], tree)

    def gather(self, tree: Any) -> Any:
        """This process's rows -> all rows, as host arrays (typed keys kept)."""
        if self.layout.num_processes == 1:
            return tree
        from jax.experimental import multihost_utils

        raw = jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)
        full = multihost_utils.process_allgather(raw, tiled=True)
        rewrap = lambda t, x: jax.random.wrap_key_data(x, impl=key_impl(t)) if is_key(t) else x  # noqa: E731
        return jax.tree_util.tree_map(rewrap, tree, full)

    def report_to_host(self, report: dict[str, Any]) -> dict[str, Any]:
        """Scalars (one run) or arrays ``[S]`` (seeds; ``[S, n]`` for a report's ``[n]`` arrays),
        the same over all processes."""
        D, S = self.layout.num_devices, self.layout.num_seeds
        if D == 1:
            return jax.device_get(report)
        if S is None:  # identical on every device: the first one's
            return jax.device_get(jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data[0], report))
        rows = {k: np.asarray(v) for k, v in jax.device_get(self.gather(report)).items()}  # [D, S / D, ...]
        return {k: v.reshape((S,) + v.shape[2:]) for k, v in rows.items()}

    def to_host(self, state: Any) -> Any:
        return self.gather(state) if self.layout.num_devices > 1 else state

    def to_device(self, state: Any) -> Any:
        if self.layout.num_devices == 1:
            return jax.device_put(state)
        return jax.device_put(self.mine(state), self.sharding)

    def unreplicate(self, tree: Any) -> Any:
        # One run: this process's first copy (they are all equal); seeds: all of them.
        S = self.layout.num_seeds
        return unreplicate_global(tree if S is None else self.to_host(tree), self.layout.num_devices, S)

    def replicate(self, tree: Any) -> Any:
        """One copy per run -> the global tree of this layout (``to_device`` places it)."""
        D, S = self.layout.num_devices, self.layout.num_seeds
        if D == 1:
            return tree
        if S is None:
            return jax.tree_util.tree_map(lambda x: np.broadcast_to(np.asarray(x), (D,) + np.shape(x))
                                          if not is_key(x) else jax.numpy.stack([x] * D), tree)
        return jax.tree_util.tree_map(lambda x: x.reshape((D, S // D) + x.shape[1:]), tree)


__all__ = ["AXIS", "Layout", "Runner", "global_template", "is_key", "key_impl", "layout_keys",
           "make_layout", "make_runner", "resolve_num_devices", "unreplicate_global"]
