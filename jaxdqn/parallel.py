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

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import numpy as np

from jaxdqn.config import DQNConfig

if TYPE_CHECKING:
    from jaxdqn.plan import BatchHook, Plan

# The plan is imported inside the functions that need it: importing gymnax creates arrays, which
# starts JAX's backends, and force_host_devices / initialize must run before that.

AXIS = "devices"


class Layout(NamedTuple):
    """Where a run lives (static)."""

    num_devices: int  # devices of all processes that run the plan
    num_local_devices: int  # of this process
    process_index: int
    num_processes: int
    num_seeds: int | None

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
        if self.num_devices == 1:
            return "1 device" + (f", {self.num_seeds} vmapped seeds" if self.num_seeds else "")
        if self.num_seeds is None:
            return f"{self.num_devices} devices{hosts}, data parallel (pmean)"
        return f"{self.num_devices} devices{hosts}, {self.seeds_per_device} vmapped seeds per device"


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


def make_layout(config: DQNConfig, num_seeds: int | None) -> Layout:
    """The layout of ``config`` with ``num_seeds``; every refusal is a ``ValueError``."""
    devices = resolve_num_devices(config)
    if num_seeds is not None and num_seeds % devices:
        raise ValueError(f"num_seeds={num_seeds} is invalid with num_devices={devices}: seeds are "
                         f"spread evenly over the devices; use a multiple of {devices}")
    if num_seeds is None:
        from jaxdqn.plan import split_totals

        split_totals(config, devices)  # raises for a total that does not divide
    local = devices // jax.process_count()
    return Layout(num_devices=devices, num_local_devices=local, process_index=jax.process_index(),
                  num_processes=jax.process_count(), num_seeds=num_seeds)


def _local_devices(layout: Layout) -> list[Any]:
    return jax.local_devices()[:layout.num_local_devices]


def is_key(x: Any) -> bool:
    """Whether ``x`` (an array or ``ShapeDtypeStruct``) holds typed PRNG keys."""
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def key_impl_name(x: Any) -> str:
    """The PRNG implementation's name of typed keys ``x`` (an array or ``ShapeDtypeStruct``)."""
    if isinstance(x, jax.Array):
        return str(jax.random.key_impl(x))
    return x.dtype._impl.name  # a ShapeDtypeStruct: jax has no public accessor for its key type


def layout_prng(num_devices: int, num_seeds: int | None) -> dict[str, Any]:
    """The ``make_plan`` keyword for a layout's random stream: one run on one device draws from
    Philox keys (``plan.plan_key``, the default); inside ``pmap`` Philox does not lower, and a
    seed must give the same run on any device count, so every other layout keeps threefry keys."""
    return {} if num_devices == 1 and num_seeds is None else {"prng_impl": None}


def layout_keys(seed: int, num_devices: int, num_seeds: int | None) -> jax.Array:
    """The global init keys of a layout: ``[]``, ``[S]``, ``[D]`` (one key, the same on every
    device: one run) or ``[D, S/D]`` (seed ``k`` of ``S`` is ``split(key(seed), S)[k]`` always)."""
    key = jax.random.key(seed)
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


def make_plan(config: DQNConfig, **kwargs: Any) -> Any:
    """``plan.make_plan``, or ``multiagent.make_plan`` for a multi-agent config / environment
    (imported here, not at the top: importing gymnax starts JAX's backends)."""
    from jaxdqn import multiagent, plan

    if multiagent.is_multi_agent_config(config):
        return multiagent.make_plan(config, **kwargs)
    return plan.make_plan(config, **kwargs)


def global_template(config: DQNConfig, num_devices: int, num_seeds: int | None) -> Any:
    """The shapes and dtypes of the global state of ``config`` laid out over ``num_devices``
    (a ``vmap`` with the device axis name stands in for ``pmap``: no devices are needed)."""
    keys = layout_keys(config.seed, num_devices, num_seeds)
    prng = layout_prng(num_devices, num_seeds)
    if num_devices == 1:
        init = make_plan(config, **prng).init
        return jax.eval_shape(init if num_seeds is None else jax.vmap(init), keys)
    if num_seeds is None:
        plan = make_plan(config, axis_name=AXIS, num_replicas=num_devices, **prng)
        return jax.eval_shape(jax.vmap(plan.init, axis_name=AXIS), keys)
    return jax.eval_shape(jax.vmap(jax.vmap(make_plan(config, **prng).init)), keys)


def unreplicate_global(tree: Any, num_devices: int, num_seeds: int | None) -> Any:
    """A global tree of a layout -> one copy per run (leaves ``[...]`` or ``[S, ...]``): the first
    device's copy when data parallel (the copies are equal), the seeds in order otherwise."""
    if num_devices == 1:
        return tree
    if num_seeds is None:
        return jax.tree_util.tree_map(lambda x: x[0], tree)
    return jax.tree_util.tree_map(lambda x: x.reshape((num_seeds,) + x.shape[2:]), tree)


def make_runner(config: DQNConfig, num_seeds: int | None = None, *,
                before_learn_on_batch: "BatchHook | None" = None) -> Runner:
    """The ``Runner`` of ``config`` on the layout that ``config.num_devices`` and ``num_seeds``
    give (see the module docstring)."""
    layout = make_layout(config, num_seeds)
    D, S = layout.num_devices, num_seeds
    prng = layout_prng(D, S)
    if layout.data_parallel:
        plan = make_plan(config, before_learn_on_batch=before_learn_on_batch, axis_name=AXIS, num_replicas=D,
                         **prng)
    else:
        plan = make_plan(config, before_learn_on_batch=before_learn_on_batch, **prng)
    local = _local_devices(layout)
    # Row i of a leaf on local device i: the sharding that pmap's own outputs have.
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(local), (AXIS,)),
                                          jax.sharding.PartitionSpec(AXIS))
    first = layout.process_index * layout.num_local_devices  # this process's rows of the global state

    keys = lambda: layout_keys(config.seed, D, S)  # noqa: E731
    template = lambda: global_template(config, D, S)  # noqa: E731
    stacked = (lambda f: jax.vmap(f)) if S is not None else (lambda f: f)
    if D == 1:
        init_fn = jax.jit(stacked(plan.init))
        chunk = jax.jit(stacked(plan.chunk), donate_argnums=0)
        init = lambda: init_fn(keys())  # noqa: E731
    else:
        # One process: the first D devices. Several: pmap's default, every device of every process
        # (``devices=`` would confine the axis, and its collectives, to this process's devices).
        pmap = dict(axis_name=AXIS, devices=local if layout.num_processes == 1 else None)
        init_fn = jax.pmap(stacked(plan.init), **pmap)
        chunk = jax.pmap(stacked(plan.chunk), donate_argnums=0, **pmap)
        init = lambda: init_fn(keys()[first:first + layout.num_local_devices])  # noqa: E731

    def gather(tree: Any) -> Any:
        """This process's rows -> all rows, as host arrays (typed keys kept)."""
        if layout.num_processes == 1:
            return tree
        from jax.experimental import multihost_utils

        raw = jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)
        full = multihost_utils.process_allgather(raw, tiled=True)
        rewrap = lambda t, x: jax.random.wrap_key_data(x, impl=key_impl_name(t)) if is_key(t) else x  # noqa: E731
        return jax.tree_util.tree_map(rewrap, tree, full)

    def report_to_host(report: dict[str, Any]) -> dict[str, Any]:
        if D == 1:
            return jax.device_get(report)
        if S is None:  # identical on every device: the first one's
            return jax.device_get(jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data[0], report))
        return {k: np.asarray(v).reshape(S) for k, v in jax.device_get(gather(report)).items()}

    def to_host(state: Any) -> Any:
        return gather(state) if D > 1 else state

    def to_device(state: Any) -> Any:
        if D == 1:
            return jax.device_put(state)
        rows = jax.tree_util.tree_map(lambda x: x[first:first + layout.num_local_devices], state)
        return jax.device_put(rows, sharding)

    def unreplicate(tree: Any) -> Any:
        # One run: this process's first copy (they are all equal); seeds: all of them.
        return unreplicate_global(tree if S is None else to_host(tree), D, S)

    def replicate(tree: Any) -> Any:
        """One copy per run -> the global tree of this layout (``to_device`` places it)."""
        if D == 1:
            return tree
        if S is None:
            return jax.tree_util.tree_map(lambda x: np.broadcast_to(np.asarray(x), (D,) + np.shape(x))
                                          if not is_key(x) else jax.numpy.stack([x] * D), tree)
        return jax.tree_util.tree_map(lambda x: x.reshape((D, S // D) + x.shape[1:]), tree)

    return Runner(layout=layout, plan=plan, init=init, chunk=chunk, template=template,
                  report_to_host=report_to_host, to_host=to_host, to_device=to_device, unreplicate=unreplicate,
                  replicate=replicate)


__all__ = ["AXIS", "Layout", "Runner", "global_template", "is_key", "key_impl_name", "layout_keys", "layout_prng",
           "make_layout", "make_runner", "resolve_num_devices", "unreplicate_global"]
