"""Stacked frames stored once (``buffers.frames``): every transition rebuilt from the frame ring
equals the one the plain buffer stores, on synthetic ALE-style trajectories (stacks filled with
the first frame at each episode's start, next-step autoreset, black and repeated frames inside
episodes) and on real games;
the memory is one frame per step; an item whose frames were overwritten never trains."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import buffers, envs, rollout
from jaxdqn.buffers import frames as frame_buffers
from jaxdqn.types import FrameItems, FrameRef, Transition


def ale_like_trajectory(rng: np.random.Generator, *, num_envs: int, steps: int, stack: int, shape=(2, 3),
                        mean_episode: float = 12.0, black: float = 0.2, repeat: float = 0.2):
    """Raw steps ``[steps, E]`` as ``atari.AtariEnv`` gives them: a stack shifts in one new frame
    per step, a new episode's stack is ``stack`` copies of its first frame; after an episode ends,
    the next step only resets (``acted`` False) and its successor is the new episode's first
    stack. Some frames are black, some repeat the one before (a still screen)."""
    obs = np.zeros((steps + 1, num_envs, *shape, stack), np.uint8)
    reward = rng.normal(size=(steps, num_envs)).astype(np.float32)
    terminated = np.zeros((steps, num_envs), bool)
    truncated = np.zeros((steps, num_envs), bool)
    acted = np.ones((steps, num_envs), bool)

    def frame(previous):
        draw = rng.random()
        if draw < repeat:
            return previous
        return np.zeros(shape, np.uint8) if draw < repeat + black else rng.integers(0, 256, shape, np.uint8)

    def first_stack():
        return np.repeat(frame(np.zeros(shape, np.uint8))[..., None], stack, axis=-1)

    for e in range(num_envs):
        current = first_stack()
        resetting = False
        for t in range(steps):
            obs[t, e] = current
            if resetting:  # the reset step: no transition, the new episode's first stack
                acted[t, e], reward[t, e] = False, 0.0
                current = first_stack()
                resetting = False
            else:
                current = np.concatenate([current[..., 1:], frame(current[..., -1])[..., None]], axis=-1)
                if rng.random() < 1 / mean_episode:
                    terminated[t, e] = rng.random() < 0.7
                    truncated[t, e] = not terminated[t, e]
                    resetting = True
        obs[steps, e] = current
    return obs, reward, terminated, truncated, acted


def windows(obs, reward, terminated, truncated, acted, *, length: int, n: int):
    """The ``extend_window`` windows (``n - 1`` carried steps + ``length`` new) of the steps
    after the ``n - 1`` primed ones, as the actor builds them."""
    steps = reward.shape[0]
    for start in range(0, steps - (length + n - 1) + 1, length):
        sl = slice(start, start + length + n - 1)
        yield rollout.RawStep(obs=jnp.asarray(obs[sl]), action=jnp.asarray(np.arange(length + n - 1)[:, None]
                                                                            * np.ones_like(acted[sl], np.int32)),
                              reward=jnp.asarray(reward[sl]), terminated=jnp.asarray(terminated[sl]),
                              truncated=jnp.asarray(truncated[sl]),
                              next_obs=jnp.asarray(obs[start + 1:start + length + n]), acted=jnp.asarray(acted[sl]))


def make_store(plain, framed, *, length: int, n: int, gamma: float):
    """One jitted store of a window into both buffers (the plain and the frame one), and their
    initial states from the first window."""
    def items(window):
        return (rollout.n_step_transitions(window, count=length, gamma=gamma, n=n),
                rollout.frame_items(window, count=length, gamma=gamma, n=n), window.acted[:length].reshape(-1))

    def init(window):
        transitions, frame_items, _ = items(window)
        first = lambda tree: jax.tree_util.tree_map(lambda x: x[0], tree)  # noqa: E731
        return plain.init(first(transitions)), framed.init(first(frame_items))

    @jax.jit
    def store(plain_state, framed_state, window):
        transitions, frame_items, mask = items(window)
        return plain.add(plain_state, transitions, mask), framed.add(framed_state, frame_items, mask), mask

    return init, store


def ring(state):
    """The item ring of a uniform or prioritized state."""
    return state.storage if isinstance(state, buffers.PrioritizedState) else state


def assert_same_contents(plain_state, frame_state, stack, *, oldest_frame=None):
    """Every stored slot (whose stack starts at step ``oldest_frame`` or later, if given): the
    transition rebuilt from references and frames is the plain one."""
    size = int(buffers.size(plain_state))
    assert int(buffers.size(frame_state)) == size
    refs = jax.tree_util.tree_map(lambda x: x[:size], ring(frame_state.items).storage)
    plain = jax.tree_util.tree_map(lambda x: np.asarray(x[:size]), ring(plain_state).storage)
    if oldest_frame is not None:
        kept = np.asarray(refs.transition.obs) - (stack - 1) >= oldest_frame
        assert kept.mean() > 0.8, kept.mean()
        refs, plain = jax.tree_util.tree_map(lambda x: x[kept], (refs, plain))
    t = refs.transition
    np.testing.assert_array_equal(frame_buffers.stacks(frame_state, t.obs, refs.env, stack), plain.obs)
    np.testing.assert_array_equal(frame_buffers.stacks(frame_state, t.next_obs, refs.env, stack), plain.next_obs)
    for field in ("action", "reward", "discount"):
        np.testing.assert_array_equal(getattr(t, field), getattr(plain, field))


@pytest.mark.parametrize("num_envs, length, n, stack, capacity, seed, kind", [
    (2, 4, 1, 4, 48, 0, "uniform"), (3, 2, 3, 4, 40, 1, "prioritized"), (1, 5, 2, 3, 17, 2, "uniform"),
    (4, 1, 1, 2, 64, 3, "prioritized")])
def test_rebuilt_transitions_equal_the_stored_ones_through_ring_wraps(num_envs, length, n, stack, capacity, seed,
                                                                      kind):
    rng = np.random.default_rng(seed)
    make = (lambda: buffers.uniform(capacity)) if kind == "uniform" else (
        lambda: buffers.prioritized(capacity, alpha=0.6, eps=1e-6))
    # Episodes of ~40 steps: under 1/16 of the steps are unstored autoreset ones, as the ring assumes.
    data = ale_like_trajectory(rng, num_envs=num_envs, steps=60 * length + n, stack=stack, mean_episode=40.0)
    plain, framed = make(), buffers.frame_replay(make(), capacity=capacity, num_envs=num_envs,
                                                 fragment_length=length, n_step=n, stack=stack)
    init, store = make_store(plain, framed, length=length, n=n, gamma=0.9)
    plain_state = framed_state = None
    for i, window in enumerate(windows(*data, length=length, n=n)):
        if plain_state is None:
            plain_state, framed_state = init(window)
        plain_state, framed_state, _ = store(plain_state, framed_state, window)
        if i % 5 == 4:
            assert_same_contents(plain_state, framed_state, stack)
    assert int(ring(plain_state).num_added) > 2 * capacity  # the rings wrapped
    if kind == "prioritized":  # priorities go to the inner buffer's slots
        td = jnp.asarray(rng.normal(size=plain_state.storage.size.item()), jnp.float32)
        slots = jnp.arange(td.shape[0], dtype=jnp.int32)
        plain_state, framed_state = plain.update(plain_state, slots, td), framed.update(framed_state, slots, td)
    # A draw: the same slots (the inner buffer draws as the plain one), the same transitions.
    key = jax.random.key(seed)
    a, b = plain.sample(plain_state, key, 32, 0.4), framed.sample(framed_state, key, 32, 0.4)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(b.weights, a.weights)
    for x, y in zip(jax.tree_util.tree_leaves(a.items), jax.tree_util.tree_leaves(b.items)):
        np.testing.assert_array_equal(x, y)
    assert isinstance(b.items, Transition)


def test_frames_take_one_frame_per_step_not_two_stacks_per_transition():
    capacity, num_envs, shape, stack = 1_000_000, 8, (84, 84), 4
    example = FrameItems(
        refs=FrameRef(transition=Transition(obs=jnp.int32(0), action=jnp.int32(0), reward=jnp.float32(0),
                                                    discount=jnp.float32(0), next_obs=jnp.int32(0)),
                              env=jnp.int32(0)),
        frames=jnp.zeros((num_envs, *shape), jnp.uint8), depth=jnp.zeros((num_envs,), jnp.int32))
    framed = buffers.frame_replay(buffers.uniform(capacity), capacity=capacity, num_envs=num_envs,
                                  fragment_length=4, n_step=3, stack=stack)
    state = jax.eval_shape(framed.init, example)
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(state))
    plain = capacity * (2 * 84 * 84 * 4 + 3 * 4)  # obs and next_obs stacks, action, reward, discount
    frames = frame_buffers.ring_steps(capacity, num_envs, 4, 3, stack) * num_envs * (84 * 84 + 4)
    # references: 6 int32 / float32 leaves per item; four int32 counters
    assert nbytes == frames + capacity * 6 * 4 + 4 * 4
    assert nbytes < plain / 7.5  # 56 GB -> 7.4 GB


def test_an_item_whose_frames_were_overwritten_gets_weight_zero():
    """Episodes of 1-2 steps leave most steps unstored (their autoreset steps), so items outlive
    their frames: those draws get importance weight 0 (they do not train); the others still
    equal the plain buffer's."""
    rng = np.random.default_rng(7)
    num_envs, length, n, stack, capacity = 2, 2, 1, 4, 32
    data = ale_like_trajectory(rng, num_envs=num_envs, steps=200, stack=stack, mean_episode=1.5)
    plain, framed = buffers.uniform(capacity), buffers.frame_replay(
        buffers.uniform(capacity), capacity=capacity, num_envs=num_envs, fragment_length=length, n_step=n,
        stack=stack)
    init, store = make_store(plain, framed, length=length, n=n, gamma=0.9)
    for i, window in enumerate(windows(*data, length=length, n=n)):
        if i == 0:
            plain_state, framed_state = init(window)
        plain_state, framed_state, _ = store(plain_state, framed_state, window)
    a, b = plain.sample(plain_state, jax.random.key(0), 256), framed.sample(framed_state, jax.random.key(0), 256)
    kept = np.asarray(b.weights) == 1.0
    assert 0 < kept.sum() < 256 and set(np.unique(b.weights)) <= {0.0, 1.0}
    written = int(framed_state.next_step) + n  # one past the newest step the last store wrote
    oldest = written - frame_buffers.ring_steps(capacity, num_envs, length, n, stack)
    drawn_steps = np.asarray(framed_state.items.storage.transition.obs)[np.asarray(b.indices)]
    np.testing.assert_array_equal(~kept, drawn_steps - (stack - 1) < oldest)  # exactly the overwritten ones
    np.testing.assert_array_equal(np.asarray(b.items.obs)[kept], np.asarray(a.items.obs)[kept])
    np.testing.assert_array_equal(np.asarray(b.items.next_obs)[kept], np.asarray(a.items.next_obs)[kept])


@pytest.mark.parametrize("game, n", [("BreakoutNoFrameskip-v4", 3), ("PongNoFrameskip-v4", 1)])
def test_real_ale_stacks_are_rebuilt_exactly(game, n):
    """The Atari env's frame stacking (no-op starts, FIRE and stacks refilled after each lost
    life, game overs) meets the frame ring's assumption: random play, every stored transition
    rebuilt bitwise."""
    num_envs, length, stack, capacity = 2, 4, 4, 600
    spec = envs.make_env(game, {"img_height": 42, "img_width": 42}, num_envs=num_envs)
    env = envs.functions(spec)
    actor = rollout.init(env, jax.random.key(0), num_envs, n - 1, acted=True)

    def policy(obs, key):
        return jax.random.randint(key, (obs.shape[0],), 0, spec.num_actions)

    steps = jax.jit(lambda actor, key, k: rollout.run_steps(env, policy, actor, rollout.step_keys(key, k, num_envs)[1]),
                    static_argnums=2)
    actor, raw, _ = steps(actor, jax.random.key(1), n - 1) if n > 1 else (actor, actor.pending, None)
    actor = actor._replace(pending=raw)
    plain, framed = buffers.uniform(capacity), buffers.frame_replay(
        buffers.uniform(capacity), capacity=capacity, num_envs=num_envs, fragment_length=length, n_step=n,
        stack=stack)
    init, store = make_store(plain, framed, length=length, n=n, gamma=0.99)
    ended = 0
    for i, key in enumerate(jax.random.split(jax.random.key(2), 400)):
        actor, raw, _ = steps(actor, key, length)
        window, pending = rollout.extend_window(actor.pending, raw)
        actor = actor._replace(pending=pending)
        if i == 0:
            plain_state, framed_state = init(window)
        plain_state, framed_state, mask = store(plain_state, framed_state, window)
        ended += int(jnp.sum(~mask))
        if i % 50 == 49:
            # Random play's short games leave more than 1/16 of the steps unstored (reset steps):
            # the oldest items outlive their frames (they are drawn with weight 0, tested above).
            oldest = int(framed_state.next_step) + n - frame_buffers.ring_steps(capacity, num_envs, length, n, stack)
            assert_same_contents(plain_state, framed_state, stack, oldest_frame=oldest)
    assert ended >= 2  # games ended and restarted within the run
    assert int(plain_state.num_added) > capacity  # the rings wrapped
