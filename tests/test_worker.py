"""The worker: what each policy acts with, and what a fragment's steps store in which buffer, for
one agent (transitions, sequences) and several (independent and lockstep replay)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig, buffers, exploration, multiagent, policy, rollout, worker
from jaxdqn.config import DEFAULT_POLICY
from jaxdqn.types import SequenceItem, Transition
from tests.test_multiagent import TaggedEnv
from tests.test_uniform_replay import chi2_critical, chi2_statistic

SMALL = dict(model=ModelConfig(fcnet_hiddens=(8,)), hiddens=(8,), buffer_size=400)


def fragment_of(work, config, num_envs, key=0):
    """One fragment of ``work``'s envs at epsilon 1 (after priming), and its items."""
    params = {pid: policy.init(p, jax.random.key(1)).params for pid, p in work.policies.items()}
    act = work.behaviour(params, jnp.float32(1.0))
    actor = work.init(jax.random.key(key))
    if work.primed and work.pending:
        actor, _ = rollout.prime(work.env, act, actor, rollout.step_keys(jax.random.key(2), work.pending, num_envs)[1])
    keys = rollout.step_keys(jax.random.key(3), config.rollout_fragment_length, num_envs)[1]
    actor, window, episodes = rollout.fragment(work.env, act, actor, keys, work.view)
    return window, work.items(window), episodes


def test_a_single_agent_worker_stores_n_step_transitions_of_every_env_step():
    config = DQNConfig(n_step=3, rollout_fragment_length=5, **SMALL)
    work = worker.single_agent(config, config.hyperparams, num_envs=4, buffer_size=400)
    assert tuple(work.policies) == work.trained == (DEFAULT_POLICY,) and tuple(work.buffers) == (DEFAULT_POLICY,)
    assert (work.pending, work.primed, work.policy_mapping, work.agents_per_policy) == (2, True, None, {})
    window, items, _ = fragment_of(work, config, 4)
    (stored, mask), = items.values()
    assert isinstance(stored, Transition) and mask is None  # a gymnax env: every step stored
    assert stored.reward.shape == (5 * 4,) and window.reward.shape == (2 + 5, 4)
    # time-major: item t * E + e is env e's step t of the window, whose obs it keeps
    np.testing.assert_array_equal(stored.obs.reshape(5, 4, -1), window.obs[:5])


def test_a_recurrent_worker_stores_sequences_and_refuses_a_buffer_smaller_than_one_store():
    config = DQNConfig(env="MemoryChain-bsuite", model=ModelConfig(use_lstm=True, lstm_cell_size=8, max_seq_len=4),
                       burn_in=2, rollout_fragment_length=8, hiddens=(8,), buffer_size=400)
    work = worker.single_agent(config, config.hyperparams, num_envs=2, buffer_size=400)
    assert (work.pending, work.primed) == (2, False)  # the burn-in of the first slice, not primed
    _, items, _ = fragment_of(work, config, 2)
    (stored, mask), = items.values()
    assert isinstance(stored, SequenceItem) and mask is None
    assert stored.mask.shape[1] == config.sequence_length == 6
    with pytest.raises(ValueError, match="buffer_size=8 holds 2 sequences"):
        worker.single_agent(config.replace(buffer_size=8), config.hyperparams, num_envs=2, buffer_size=8)


def test_the_behaviour_policy_is_epsilon_greedy_on_its_network():
    """At epsilon 0 the actions are the network's argmax; at epsilon 0.3 a row keeps it with
    probability 0.7 + 0.3 / A and takes every other action with 0.3 / A (chi-square)."""
    config = DQNConfig(env="Breakout-MinAtar", model=ModelConfig(fcnet_hiddens=(), conv_filters=((4, 3, 1),)),
                       hiddens=(8,), buffer_size=400)
    work = worker.single_agent(config, config.hyperparams, num_envs=1, buffer_size=400)
    bundle = work.policies[DEFAULT_POLICY]
    params = {DEFAULT_POLICY: policy.init(bundle, jax.random.key(0)).params}
    obs = jax.random.bernoulli(jax.random.key(1), 0.3, (4000,) + bundle.obs.shape).astype(jnp.uint8)
    greedy = np.argmax(np.asarray(bundle.network.apply(params[DEFAULT_POLICY], obs).q), axis=-1)
    np.testing.assert_array_equal(work.behaviour(params, jnp.float32(0.0))(obs, jax.random.key(2)), greedy)
    actions = np.asarray(work.behaviour(params, jnp.float32(0.3))(obs, jax.random.key(3)))
    num_actions = bundle.network.num_actions
    offset = (actions - greedy) % num_actions  # 0: the greedy action
    want = np.full(num_actions, 0.3 / num_actions)
    want[0] += 0.7
    counts = np.bincount(offset, minlength=num_actions)
    assert chi2_statistic(counts, want) < chi2_critical(num_actions - 1)


def test_epsilon_greedy_is_uniform_when_exploring():
    q = jnp.zeros((20_000, 5)).at[:, 2].set(1.0)
    actions = np.asarray(exploration.epsilon_greedy(jax.random.key(0), q, jnp.float32(1.0)))
    assert chi2_statistic(np.bincount(actions, minlength=5), np.full(5, 0.2)) < chi2_critical(4)
    assert (np.asarray(exploration.epsilon_greedy(jax.random.key(1), q, jnp.float32(0.0))) == 2).all()


def tagged(**overrides):
    multi = dict(policies={"p0": None, "p1": {"gamma": 0.5}},
                 policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", "agent_2": "p1"})
    return DQNConfig(env=TaggedEnv(), multiagent={**multi, **overrides.pop("multiagent", {})}, n_step=2,
                     rollout_fragment_length=3, env_params={"done_when": "any"}, **SMALL, **overrides)


def test_independent_replay_stores_each_policys_agents_in_its_own_buffer_with_its_gamma():
    config = tagged()
    work = multiagent.make_worker(config, config.hyperparams, num_envs=2, buffer_size=400)
    assert work.agents_per_policy == {"p0": 1, "p1": 2} and work.policy_mapping["agent_2"] == "p1"
    _, items, _ = fragment_of(work, config, 2)
    assert set(items) == {"p0", "p1"}
    p0, p1 = items["p0"][0], items["p1"][0]
    assert p0.obs.shape == (3 * 2, 2) and p1.obs.shape == (2 * 3 * 2, 2)  # agent_1's items, then agent_2's
    np.testing.assert_array_equal(p0.obs[:, 0], 0)
    np.testing.assert_array_equal(p1.obs[:, 0], [1] * 6 + [2] * 6)
    # two-step returns (no episode end in the first 3 + 1 steps): r + gamma r with each policy's gamma
    np.testing.assert_allclose(p0.reward, 1 + 0.99 * 1)
    np.testing.assert_allclose(p1.reward, np.repeat([2 + 0.5 * 2, 3 + 0.5 * 3], 6))


def test_lockstep_replay_samples_the_same_joint_steps_for_every_policy():
    config = tagged(multiagent={"replay_mode": "lockstep"}, prioritized_replay=False)
    work = multiagent.make_worker(config, config.hyperparams, num_envs=2, buffer_size=400)
    assert tuple(work.buffers) == (multiagent.LOCKSTEP,)
    assert {p.buffer_id for p in work.policies.values()} == {multiagent.LOCKSTEP}
    _, items, _ = fragment_of(work, config, 2)
    joint = work.buffers[multiagent.LOCKSTEP]
    state = joint.add(joint.init(jax.tree_util.tree_map(lambda x: x[0], items[multiagent.LOCKSTEP][0])),
                      items[multiagent.LOCKSTEP][0])
    key = jax.random.key(5)
    whole = joint.sample(state, key, 16)
    for pid, agents in (("p0", ["agent_0"]), ("p1", ["agent_1", "agent_2"])):
        sample = work.policies[pid].buffer.sample(state, key, 16)
        want = np.concatenate([np.asarray(buffers.uniform_replay.dispatch.gather(
            state.storage[a], whole.indices).obs) for a in agents])
        np.testing.assert_array_equal(sample.items.obs, want)
        np.testing.assert_array_equal(sample.indices, np.tile(whole.indices, len(agents)))


def test_each_policys_agent_episodes_are_its_ring_entries():
    config = tagged()
    work = multiagent.make_worker(config, config.hyperparams, num_envs=2, buffer_size=400)
    episodes = rollout.Episodes(done=jnp.ones((3, 2), bool),
                                episode_return={a: jnp.full((3, 2), float(i)) for i, a in enumerate(TaggedEnv.agents)},
                                episode_length=jnp.full((3, 2), 4))
    per_policy = work.policy_episodes(episodes)
    assert per_policy["p0"].episode_return.shape == (3, 2, 1) and per_policy["p1"].done.shape == (3, 2, 2)
    np.testing.assert_array_equal(per_policy["p1"].episode_return[0, 0], [1.0, 2.0])
    np.testing.assert_array_equal(rollout.joint_return(episodes), 0.0 + 1.0 + 2.0)
