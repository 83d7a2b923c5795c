"""Multi-agent DQN: the joint-episode env contract, per-policy buffers and learners, lockstep
replay, RLlib's per-policy metrics, and refusals. A tagged probe env makes every stored item
say which agent it came from."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, Trainer
from jaxdqn.buffers import size
from jaxdqn.multiagent import MultiAgentEnv
from jaxdqn.multiagent import envs as multi_agent_envs
from jaxdqn.plan import make_plan
from tests.test_plan import assert_equal_but_learner_stats

GAMMA = 0.9


class TaggedEnv(MultiAgentEnv):
    """Three agents; agent i observes ``[i, t]`` and earns ``i + 1`` per step; the joint episode
    ends after 5 steps, terminated for agent_0 and by the time limit for the others."""

    agents = ("agent_0", "agent_1", "agent_2")

    @property
    def default_params(self):
        return None

    def obs(self, t):
        return {a: jnp.array([i, t], jnp.float32) for i, a in enumerate(self.agents)}

    def reset_env(self, key, params):
        return self.obs(0), jnp.int32(0)

    def step_env(self, key, state, actions, params):
        t = state + 1
        rewards = {a: jnp.float32(i + 1) for i, a in enumerate(self.agents)}
        end = t >= 5
        terminated = {a: end & (a == "agent_0") for a in self.agents}
        truncated = {a: end & (a != "agent_0") for a in self.agents}
        return self.obs(t), t, rewards, terminated, truncated

    def observation_space(self, agent, params):
        from gymnax.environments import spaces
        return spaces.Box(0.0, 10.0, (2,))

    def action_space(self, agent, params):
        from gymnax.environments import spaces
        return spaces.Discrete(2)


def tagged_config(**overrides):
    base = dict(env=TaggedEnv(), multiagent=dict(policies={"p0": None, "p1": {"lr": 1e-2}},
                                                 policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", "agent_2": "p1"}),
                gamma=GAMMA, n_step=2, num_envs_per_worker=2, rollout_fragment_length=5, train_batch_size=8,
                buffer_size=200, learning_starts=20, timesteps_per_iteration=20, total_timesteps=40,
                hiddens=(8,), model=dict(fcnet_hiddens=(8,)), evaluation_num_episodes=2,
                target_network_update_freq=20)
    base.update(overrides)
    return DQNConfig(**base)


def test_the_joint_episode_ends_for_every_agent_at_the_first_end():
    spec = multi_agent_envs.make_multi_agent_env("MultiCartPole-v1", {"num_agents": 3, "done_when": "any"})
    obs, state = multi_agent_envs.reset(spec, jax.random.split(jax.random.key(0), 16))
    step = jax.jit(lambda k, s, a: multi_agent_envs.step(spec, jax.random.split(k, 16), s, a))
    ended = 0
    for t in range(60):
        actions = {a: jax.random.randint(jax.random.fold_in(jax.random.key(t), i), (16,), 0, 2)
                   for i, a in enumerate(spec.agents)}
        out, state = step(jax.random.key(100 + t), state, actions)
        ends = np.stack([np.asarray(out.terminated[a] | out.truncated[a]) for a in spec.agents])
        assert np.all(ends == ends[0])  # one joint episode
        for a in spec.agents:
            x, theta = np.asarray(out.next_obs[a][:, 0]), np.asarray(out.next_obs[a][:, 2])
            fell = (np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)
            np.testing.assert_array_equal(np.asarray(out.terminated[a]), fell)  # its own pole
            np.testing.assert_array_equal(np.asarray(out.truncated[a]), ends[0] & ~fell)  # the others bootstrap
            reset = np.asarray(out.obs[a])[ends[0]]
            assert np.all(np.abs(reset) <= 0.05)  # all agents start afresh together
        ended += int(ends[0].sum())
    assert ended > 16  # random play drops poles within 60 steps


def test_by_default_the_joint_episode_ends_when_every_agent_has_ended():
    """RLlib's make_multi_agent: an agent whose pole fell stops playing (no reward, no transition)
    while the others go on; the joint episode ends (and all reset) when no pole is up."""
    spec = multi_agent_envs.make_multi_agent_env("MultiCartPole-v1", {"num_agents": 3})
    assert spec.done_when == "all"
    obs, state = multi_agent_envs.reset(spec, jax.random.split(jax.random.key(0), 16))
    step = jax.jit(lambda k, s, a: multi_agent_envs.step(spec, jax.random.split(k, 16), s, a))
    playing = {a: np.ones(16, bool) for a in spec.agents}
    ended = staggered = 0
    for t in range(150):
        actions = {a: jax.random.randint(jax.random.fold_in(jax.random.key(t), i), (16,), 0, 2)
                   for i, a in enumerate(spec.agents)}
        out, state = step(jax.random.key(100 + t), state, actions)
        fell = {}
        for a in spec.agents:
            x, theta = np.asarray(out.next_obs[a][:, 0]), np.asarray(out.next_obs[a][:, 2])
            fell[a] = (np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)
            np.testing.assert_array_equal(np.asarray(out.valid[a]), playing[a])
            np.testing.assert_array_equal(np.asarray(out.terminated[a]), playing[a] & fell[a])
            np.testing.assert_array_equal(np.asarray(out.reward[a]), playing[a].astype(np.float32))
        still = {a: playing[a] & ~fell[a] for a in spec.agents}
        done = ~np.any(np.stack(list(still.values())), axis=0)
        np.testing.assert_array_equal(np.asarray(out.episode_end), done)
        staggered += int(np.sum(np.any(np.stack([playing[a] & fell[a] for a in spec.agents]), axis=0) & ~done))
        playing = {a: np.where(done, True, still[a]) for a in spec.agents}
        ended += int(done.sum())
    assert ended > 16 and staggered > 16  # joint episodes ended, and agents ended before them


class StaggeredEnv(MultiAgentEnv):
    """Agent i earns i + 1 per step and terminates after 2 (i + 1) steps; it observes ``[i, t]``."""

    agents = ("agent_0", "agent_1", "agent_2")

    @property
    def default_params(self):
        return None

    def reset_env(self, key, params):
        return {a: jnp.array([i, 0.0]) for i, a in enumerate(self.agents)}, jnp.int32(0)

    def step_env(self, key, state, actions, params):
        t = state + 1
        obs = {a: jnp.array([i, t], jnp.float32) for i, a in enumerate(self.agents)}
        rewards = {a: jnp.float32(i + 1) for i, a in enumerate(self.agents)}
        terminated = {a: t >= 2 * (i + 1) for i, a in enumerate(self.agents)}
        return obs, t, rewards, terminated, {a: jnp.bool_(False) for a in self.agents}

    observation_space = TaggedEnv.observation_space
    action_space = TaggedEnv.action_space


@pytest.mark.parametrize("done_when, length, returns", [("all", 6, (2, 8, 18)), ("any", 2, (2, 4, 6))])
def test_finished_agents_store_nothing_and_score_what_they_played(done_when, length, returns):
    config = tagged_config(env=StaggeredEnv(), env_params={"done_when": done_when}, n_step=1,
                           rollout_fragment_length=6, learning_starts=0, timesteps_per_iteration=48,
                           multiagent=dict(policies=["p0", "p1", "p2"],
                                           policy_mapping_fn={f"agent_{i}": f"p{i}" for i in range(3)}))
    plan = make_plan(config)
    state, report = jax.jit(plan.chunk)(jax.jit(plan.init)(jax.random.key(0)))
    steps = int(report["timesteps_total"])  # per env: whole joint episodes of `length` steps
    episodes = steps // config.num_envs // length
    assert float(report["episode_len_mean"]) == length and int(report["episodes_total"]) == episodes * 2
    assert float(report["episode_reward_mean"]) == sum(returns)
    for i, want in enumerate(returns):
        assert float(report[f"policy_reward_mean/p{i}"]) == want
        buffer = state.buffer[f"p{i}"]
        count = int(size(buffer))
        acted = min(2 * (i + 1), length)  # steps agent i plays per joint episode
        assert count == acted * episodes * config.num_envs
        times = np.asarray(buffer.storage.storage.obs[:count, 1])
        assert set(times.tolist()) == set(range(acted))  # no step after its end was stored
        drawn = plan_buffer_draws(config, buffer)  # prioritized: no priority on a slot left empty
        assert drawn.max() < count


def plan_buffer_draws(config, buffer):
    from jaxdqn import buffers

    buf = buffers.prioritized(config.buffer_size)
    return np.asarray(buf.sample(buffer, jax.random.key(5), 2000, 0.4).indices)


def test_lockstep_replay_needs_done_when_any():
    with pytest.raises(ValueError, match="done_when"):
        make_plan(tagged_config(env=StaggeredEnv(), prioritized_replay=False,
                                           multiagent=dict(policies=["p0"], replay_mode="lockstep")))
    with pytest.raises(ValueError, match="done_when"):
        multi_agent_envs.make_multi_agent_env("MultiCartPole-v1", {"done_when": "first"})


def test_independent_replay_keeps_each_policys_agents_and_reports_per_policy():
    config = tagged_config()
    plan = make_plan(config)
    state, reports = jax.jit(plan.train)(jax.random.key(0))
    # p0 holds agent_0's items only, p1 those of agent_1 and agent_2; 2 envs, n-step primed
    for pid, tags, per_store in (("p0", {0.0}, 10), ("p1", {1.0, 2.0}, 20)):
        buffer = state.buffer[pid]
        count = int(size(buffer))
        # a warm-up store (the next reaches learning_starts), then 3 of 10 env steps: results at 20 env
        # steps (RLlib's first at max(learning_starts, timesteps_per_iteration)) and 40 (total_timesteps)
        assert count == per_store * (1 + 3)
        items = jax.tree_util.tree_map(lambda x: np.asarray(x[:count]), buffer.storage.storage)
        assert set(np.unique(items.obs[:, 0])) == tags
        # 2-step returns of agent i: (i+1)(1 + gamma), or (i+1) on an episode's last step
        reward_rate = items.obs[:, 0] + 1
        last = items.obs[:, 1] == 4
        np.testing.assert_allclose(items.reward, np.where(last, reward_rate, reward_rate * (1 + GAMMA)), rtol=1e-6)
        # agent_0 terminates (no bootstrap), the others are truncated (bootstrap with gamma^k)
        ends_within = items.obs[:, 1] >= 3  # the 2-step window reaches the episode's last step
        expected = np.where(items.obs[:, 0] == 0, np.where(ends_within, 0.0, GAMMA**2),
                            np.where(last, GAMMA, GAMMA**2))
        np.testing.assert_allclose(items.discount, expected, rtol=1e-6)
    reports = jax.device_get(reports)
    np.testing.assert_allclose(reports["episode_reward_mean"][-1], 5 * (1 + 2 + 3))
    np.testing.assert_allclose(reports["policy_reward_mean/p0"][-1], 5.0)
    np.testing.assert_allclose(reports["policy_reward_mean/p1"][-1], (10.0 + 15.0) / 2)  # one entry per agent
    assert reports["policy_reward_min/p1"][-1] == 10.0 and reports["policy_reward_max/p1"][-1] == 15.0
    np.testing.assert_allclose(reports["learner/p1/cur_lr"][-1], 1e-2)  # the override
    np.testing.assert_allclose(reports["learner/p0/cur_lr"][-1], 5e-4)
    assert np.isfinite(reports["learner/p0/loss"][-1]) and np.isfinite(reports["learner/p1/loss"][-1])
    assert reports["num_steps_trained"][-1] == 3 * 8  # 3 replays (one per store after the warm-up) of 8 env steps


def test_lockstep_replays_joint_steps_and_policies_to_train_freezes_the_rest():
    config = tagged_config(prioritized_replay=False, env_params={"done_when": "any"},
                           multiagent=dict(policies=["p0", "p1"], replay_mode="lockstep", policies_to_train=["p1"],
                                           policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", "agent_2": "p1"}))
    plan = make_plan(config)
    init = jax.jit(plan.init)(jax.random.key(0))
    state, reports = jax.jit(plan.train)(jax.random.key(0))
    items = state.buffer["lockstep"].storage
    count = int(state.buffer["lockstep"].size)
    assert count == 10 * (1 + 3)  # one joint item per env step: a warm-up store, then 3
    # every joint item holds the three agents at the same time step
    times = np.stack([np.asarray(items[a].obs[:count, 1]) for a in TaggedEnv.agents])
    assert np.all(times == times[0])
    assert "learner/p0/loss" not in reports and np.isfinite(reports["learner/p1/loss"][-1])
    jax.tree_util.tree_map(np.testing.assert_array_equal, state.learner["p0"].params, init.learner["p0"].params)
    changed = jax.tree_util.tree_map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
                                     state.learner["p1"].params, init.learner["p1"].params)
    assert any(jax.tree_util.tree_leaves(changed))


@pytest.mark.parametrize("changes, match", [
    (dict(multiagent=dict(policies=["p0"], replay_mode="lockstep")), "lockstep.*prioritized"),
    (dict(multiagent=dict(policies={"p0": {"buffer_size": 10}})), r"multiagent.policies.p0.buffer_size"),
    (dict(multiagent=dict(policies=["p0", "p1"])), "policy_mapping_fn.*required"),
    (dict(multiagent=dict(policies=["p0"], policy_mapping_fn={"agent_0": "p9"})), "unknown policies"),
    (dict(multiagent=dict(policies=["p0"], policies_to_train=["p1"])), "policies_to_train"),
    (dict(multiagent=dict(policies=["p0"], replay_mode="joint")), "replay_mode"),
    (dict(multiagent=dict(policies=["p0"], sharing=True)), "multiagent.sharing"),
    (dict(multiagent=dict(policies=["p0"]), model=dict(use_lstm=True)), "model.use_lstm"),
])
def test_bad_multiagent_configs_are_refused_naming_the_key(changes, match):
    with pytest.raises(ValueError, match=match):
        tagged_config(**changes)


def test_mappings_the_env_does_not_fit_are_refused_before_compiling():
    with pytest.raises(ValueError, match=r"does not map the agents \['agent_2'\]"):
        make_plan(tagged_config(multiagent=dict(policies=["p0"], policy_mapping_fn={
            "agent_0": "p0", "agent_1": "p0"})))
    with pytest.raises(ValueError, match="policy 'p1' has no agent"):
        make_plan(tagged_config(multiagent=dict(policies=["p0", "p1"], policy_mapping_fn=lambda a: "p0")))


def test_trainer_reports_rllib_multiagent_results_and_round_trips(tmp_path):
    config = DQNConfig(env="MultiCartPole-v1", env_params={"num_agents": 2}, num_envs_per_worker=2,
                       multiagent=dict(policies=["p0", "p1"], policy_mapping_fn=lambda a: "p" + a[-1]),
                       train_batch_size=8, buffer_size=400, learning_starts=40, timesteps_per_iteration=200,
                       hiddens=(8,), model=dict(fcnet_hiddens=(8,)), evaluation_num_episodes=2)
    trainer = Trainer(config)
    assert trainer.config.multiagent.policy_mapping_fn == (("agent_0", "p0"), ("agent_1", "p1"))  # resolved
    result = trainer.train()
    assert set(result["info"]["learner"]) == {"p0", "p1"}
    assert set(result["policy_reward_mean"]) == {"p0", "p1"}
    # each agent earns 1 per step it plays; the joint return sums them over the same episodes, and
    # the joint episode lasts as long as the longer-lived agent
    mean = result["policy_reward_mean"]
    assert mean["p0"] + mean["p1"] == pytest.approx(result["episode_reward_mean"])
    assert max(mean.values()) <= result["episode_len_mean"] <= result["episode_reward_mean"]
    hist = result["hist_stats"]  # the window's episodes, one entry per agent episode of a policy
    assert set(hist) == {"episode_reward", "episode_lengths", "policy_p0_reward", "policy_p1_reward"}
    assert np.mean(hist["policy_p0_reward"]) == pytest.approx(mean["p0"])
    assert np.mean(hist["episode_reward"]) == pytest.approx(result["episode_reward_mean"])
    path = trainer.save(tmp_path)
    after = trainer.train()
    restored = Trainer.from_checkpoint(path)
    again = restored.train()
    assert again["info"]["learner"]["p1"]["learner_stats"] == after["info"]["learner"]["p1"]["learner_stats"]
    obs = np.zeros(4, np.float32)
    expected = int(np.argmax(trainer.plan.networks["p1"].apply(trainer.params["p1"], obs[None], deterministic=True).q))
    assert trainer.compute_single_action(obs, policy_id="p1", explore=False) == expected
    with pytest.raises(ValueError, match="policy_id"):
        trainer.compute_single_action(obs, policy_id="p7")
    assert np.isfinite(trainer.evaluate()["evaluation"]["episode_reward_mean"])


def test_a_chunk_reports_every_policys_statistics_of_its_last_sgd_step():
    """As for one agent (tests/test_plan.py): only the chunk's last replay computes the learner
    statistics; state and per-policy statistics equal those of step-by-step iterations."""
    plan = make_plan(tagged_config(learning_starts=10))  # no warm-up: a first chunk of 2 stores
    s = plan.schedule
    iterations = s.chunk_stores(s.warmup_steps, s.warmup_steps) // s.period  # the first chunk's
    assert iterations > 1
    state = jax.jit(plan.init)(jax.random.key(1))
    fast, report = jax.jit(plan.chunk)(state)
    slow = state
    for _ in range(iterations):
        slow = jax.jit(plan.iteration)(slow)[0]
    for pid in ("p0", "p1"):
        stats = slow.metrics.learner[pid]
        assert float(stats.grad_gnorm) > 0.0
        for name in ("loss", "mean_q", "min_q", "max_q", "mean_td_error", "cur_lr", "grad_gnorm"):
            np.testing.assert_allclose(report[f"learner/{pid}/{name}"], getattr(stats, name), rtol=1e-6,
                                       err_msg=f"{pid} {name}")
    assert_equal_but_learner_stats(fast, slow)
