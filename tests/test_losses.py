"""Losses against hand-computed values and numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn import losses


def test_q_learning_and_double_q_by_hand():
    q_tm1 = jnp.array([1.0, 2.0, 3.0])
    q_t_target = jnp.array([0.5, 4.0, 1.0])
    q_t_online = jnp.array([9.0, 0.0, 1.0])  # the online net prefers action 0
    td = losses.q_learning_td(q_tm1, 1, 1.0, 0.9, q_t_target)
    assert td == pytest.approx(1.0 + 0.9 * 4.0 - 2.0)
    td = losses.double_q_learning_td(q_tm1, 1, 1.0, 0.9, q_t_target, q_t_online)
    assert td == pytest.approx(1.0 + 0.9 * 0.5 - 2.0)  # target net's value of the online argmax
    assert losses.q_learning_td(q_tm1, 2, 1.0, 0.0, q_t_target) == pytest.approx(1.0 - 3.0)


def test_no_gradient_flows_through_the_target():
    grad = jax.grad(lambda q: losses.q_learning_td(q, 0, 1.0, 0.9, q))(jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(grad, [-1.0, 0.0])


@given(st.floats(-50, 50), st.floats(0.1, 5.0))
def test_huber_and_mse_formulas(x, delta):
    expected = 0.5 * x * x if abs(x) <= delta else delta * (abs(x) - 0.5 * delta)
    assert float(losses.huber(jnp.float32(x), delta)) == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert float(losses.mse(jnp.float32(x))) == pytest.approx(0.5 * x * x, rel=1e-5, abs=1e-5)


def test_weighted_mean():
    assert losses.weighted_mean(jnp.array([1.0, 3.0]), jnp.array([1.0, 0.5])) == pytest.approx(1.25)


def test_rllib_n_step_docstring_example_with_true_discounts():
    # RLlib's adjust_nstep example: n=3, gamma=0.9, five steps, the episode ends at step 4.
    r = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    end = jnp.array([False, False, False, False, True])
    g = 0.9
    returns, discounts, steps = losses.n_step_returns(r, end, jnp.zeros(5, bool), gamma=g, n=3)
    np.testing.assert_allclose(
        returns, [1 + g * 2 + g * g * 3, 2 + g * 3 + g * g * 4, 3 + g * 4 + g * g * 5, 4 + g * 5, 5], rtol=1e-6
    )
    np.testing.assert_array_equal(steps, [3, 3, 3, 2, 1])
    np.testing.assert_allclose(discounts, [g**3, g**3, 0, 0, 0], rtol=1e-6)  # terminated: no bootstrap
    # The same episode truncated instead: bootstrap with gamma^k for the k steps taken.
    returns, discounts, steps = losses.n_step_returns(r, jnp.zeros(5, bool), end, gamma=g, n=3)
    np.testing.assert_allclose(discounts, [g**3, g**3, g**3, g**2, g], rtol=1e-6)


def n_step_loops(r, term, trunc, gamma, n):
    out_r, out_d, out_k = [], [], []
    for t in range(len(r)):
        total, k, terminated = 0.0, 0, False
        for j in range(n):
            if t + j >= len(r):
                break
            total += gamma**j * r[t + j]
            k += 1
            if term[t + j]:
                terminated = True
                break
            if trunc[t + j]:
                break
        out_r.append(total)
        out_d.append(0.0 if terminated else gamma**k)
        out_k.append(k)
    return np.array(out_r), np.array(out_d), np.array(out_k)


@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 2**16))
def test_n_step_matches_loops(length, n, seed):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=length).astype(np.float32)
    term, trunc = rng.random(length) < 0.2, rng.random(length) < 0.15
    got = losses.n_step_returns(jnp.asarray(r), jnp.asarray(term), jnp.asarray(trunc), gamma=0.95, n=n)
    want = n_step_loops(r, term, trunc, 0.95, n)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [17, 40, 100_000])
def test_a_long_look_ahead_is_a_rolled_loop_with_the_same_returns(n):
    """Beyond ``UNROLLED_N_STEP`` the sum runs as a loop (its program does not grow with n)."""
    rng = np.random.default_rng(n)
    length = 60
    r = rng.normal(size=length).astype(np.float32)
    term, trunc = rng.random(length) < 0.03, rng.random(length) < 0.02
    fn = jax.jit(lambda *a: losses.n_step_returns(*a, gamma=0.97, n=n))
    got = fn(jnp.asarray(r), jnp.asarray(term), jnp.asarray(trunc))
    for g, w in zip(got, n_step_loops(r, term, trunc, 0.97, n)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5)
    assert "while" in fn.lower(jnp.asarray(r), jnp.asarray(term), jnp.asarray(trunc)).as_text()


def project_numpy(z_target, probs, z):
    """The textbook C51 projection with floor/ceil and the floor == ceil case."""
    v_min, v_max, n = z[0], z[-1], len(z)
    dz = (v_max - v_min) / (n - 1)
    m = np.zeros(n)
    for zj, pj in zip(z_target, probs):
        b = (np.clip(zj, v_min, v_max) - v_min) / dz
        lo, hi = int(np.floor(b)), int(np.ceil(b))
        if lo == hi:
            m[lo] += pj
        else:
            m[lo] += pj * (hi - b)
            m[hi] += pj * (b - lo)
    return m


@given(st.floats(-3, 3), st.floats(0, 1), st.integers(0, 2**16))
def test_categorical_projection_matches_numpy_and_conserves_mass(reward, discount, seed):
    z = np.linspace(-2.0, 2.0, 11).astype(np.float32)
    probs = np.random.default_rng(seed).dirichlet(np.ones(11)).astype(np.float32)
    z_target = reward + discount * z
    got = np.asarray(losses.categorical_projection(jnp.asarray(z_target), jnp.asarray(probs), jnp.asarray(z)))
    np.testing.assert_allclose(got, project_numpy(z_target, probs, z), atol=1e-5)
    assert got.sum() == pytest.approx(1.0, abs=1e-5)


def test_categorical_projection_when_atoms_land_exactly_on_the_support():
    z = jnp.linspace(-1.0, 1.0, 5)  # spacing 0.5
    probs = jnp.array([0.1, 0.2, 0.3, 0.25, 0.15])
    got = losses.categorical_projection(z + 0.5, probs, z)  # every atom shifts one slot right
    np.testing.assert_allclose(got, [0.0, 0.1, 0.2, 0.3, 0.4], atol=1e-6)  # the last two clip


def test_categorical_td_is_cross_entropy_of_the_projection():
    z = jnp.linspace(-1.0, 1.0, 5)
    logits = jnp.zeros((2, 5))
    probs_t = jnp.tile(jnp.array([[0.0, 0.0, 1.0, 0.0, 0.0]]), (2, 1))  # all mass at 0
    loss = losses.categorical_td(logits, 0, 0.5, 0.0, probs_t, 1, z)  # target: all mass at 0.5
    assert loss == pytest.approx(np.log(5.0), rel=1e-6)  # uniform prediction
    logits = jnp.zeros((2, 5)).at[0, 3].set(10.0)
    assert losses.categorical_td(logits, 0, 0.5, 0.0, probs_t, 1, z) < 1e-3


def test_masked_sequence_mean_skips_burn_in_and_padding():
    values = jnp.array([[10.0, 10.0, 1.0, 3.0], [10.0, 2.0, 4.0, 99.0]])
    mask = jnp.array([[1, 1, 1, 1], [0, 1, 1, 0]], bool)
    np.testing.assert_allclose(losses.masked_sequence_mean(values, mask, burn_in=2), [2.0, 4.0])
    grads = jax.grad(lambda v: losses.masked_sequence_mean(v, mask, burn_in=2).sum())(values)
    np.testing.assert_array_equal(grads[:, :2], 0.0)


@given(st.floats(-1e4, 1e4), st.sampled_from([1e-3, 1e-2, 0.5]))
def test_h_inverse_undoes_r2d2s_value_rescaling(x, eps):
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018) and its closed-form inverse."""
    expected = np.sign(x) * (np.sqrt(abs(x) + 1) - 1) + eps * x
    np.testing.assert_allclose(losses.h_function(jnp.float32(x), eps), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.h_inverse(losses.h_function(jnp.float32(x), eps), eps), x,
                               rtol=1e-4, atol=1e-3)
