"""Envs that step on the host: Gymnasium ids and the user's own envs, registered by name, trained
through the same compiled store / replay step as a JAX env (jaxdqn.hostenv)."""

import os
import pathlib

import gymnasium
import jax
import numpy as np
import pytest
from gymnasium import spaces

import jaxdqn
from jaxdqn import DQNConfig, ModelConfig, SimpleQConfig, Trainer, hostenv
from tests.test_plan import rllib_report_points


class Corridor(gymnasium.Env):
    """Cells 0..length-1, start at 0; action 1 steps right, 0 left; reward 1 on reaching the last
    cell (terminated); an episode is cut after ``limit`` steps (truncated). Observations: the
    cell, a Discrete space (one-hot for the network)."""

    def __init__(self, config):
        self.length, self.limit = config.get("length", 5), config.get("limit", 12)
        self.observation_space, self.action_space = spaces.Discrete(self.length), spaces.Discrete(2)
        self.log = config.get("log")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.t = 0, 0
        return self.cell, {}

    def step(self, action):
        before = self.cell
        self.cell = min(max(self.cell + (1 if action == 1 else -1), 0), self.length - 1)
        self.t += 1
        terminated = self.cell == self.length - 1
        truncated = not terminated and self.t >= self.limit
        reward = 1.0 if terminated else 0.0
        if self.log is not None:
            self.log.append((id(self), before, int(action), reward, terminated, truncated, self.cell))
        return self.cell, reward, terminated, truncated, {}


def corridor_config(**overrides):
    base = dict(env="corridor", num_envs_per_worker=2, rollout_fragment_length=4, train_batch_size=16,
                buffer_size=2000, learning_starts=64, timesteps_per_iteration=200, target_network_update_freq=100,
                lr=5e-3, gamma=0.9, hiddens=(16,), model=ModelConfig(fcnet_hiddens=(16,)), total_timesteps=4000,
                exploration_config=dict(epsilon_timesteps=1500, final_epsilon=0.05))
    base.update(overrides)
    return DQNConfig(**base)


@pytest.fixture(autouse=True)
def corridor():
    jaxdqn.register_env("corridor", Corridor)
    yield
    hostenv.ENV_CREATORS.pop("corridor", None)


def test_a_name_means_one_backend_by_one_rule():
    assert not hostenv.is_host_env("CartPole-v1")  # gymnax's
    assert hostenv.is_host_env("gymnasium:CartPole-v1")  # Gymnasium's, by its explicit form
    assert hostenv.is_host_env("corridor")  # registered
    assert hostenv.is_host_env("LunarLander-v3")  # only Gymnasium knows it
    assert not hostenv.is_host_env("Breakout-MinAtar") and not hostenv.is_host_env("ALE/Pong-v5")
    with pytest.raises(ValueError, match="is not a gymnax environment"):
        Trainer(DQNConfig(env="NoSuchEnv-v9"))
    with pytest.raises(ValueError, match="name='gymnasium:x' is invalid"):
        jaxdqn.register_env("gymnasium:x", Corridor)


def test_a_registered_env_of_a_few_lines_is_learned_and_evaluated():
    """A user's gymnasium.Env registered by name (RLlib's tune.register_env) trains: the greedy
    policy walks right from every cell, and episodes end in the 4 steps the corridor takes. Every
    5th iteration evaluates it on envs of its own (RLlib's evaluation_interval): the greedy
    episodes are those 4 steps, once learned; before, one of them may be cut at the limit."""
    trainer = Trainer(corridor_config(evaluation_interval=5, evaluation_num_episodes=3))
    results = [trainer.train() for _ in range(15)]
    assert [r["timesteps_total"] for r in results[:3]] == [200, 400, 600]
    greedy = [trainer.compute_single_action(np.eye(5, dtype=np.float32)[cell], explore=False) for cell in range(4)]
    assert greedy == [1, 1, 1, 1]
    assert results[-1]["episode_len_mean"] < 5.0 and results[-1]["episode_reward_mean"] == 1.0
    assert [i for i, r in enumerate(results, 1) if "evaluation" in r] == [5, 10, 15]
    last = results[-1]["evaluation"]
    assert last["hist_stats"]["episode_reward"] == [1.0, 1.0, 1.0] and last["episode_len_mean"] == 4.0
    assert last["episodes_this_iter"] == 3
    for r in results[4::5]:  # an episode is cut at the limit (12 steps, reward 0) or reaches the end
        ev = r["evaluation"]
        assert all(ret in (0.0, 1.0) for ret in ev["hist_stats"]["episode_reward"])
        assert 4.0 <= ev["episode_len_mean"] <= 12.0


def test_an_exploring_evaluation_acts_at_the_runs_epsilon():
    """evaluation_config.explore: epsilon-greedy at the run's epsilon; an untrained run's epsilon
    is 1 (uniform actions), so episodes take longer than the greedy walk and differ."""
    trainer = Trainer(corridor_config(evaluation_config={"explore": True}, evaluation_num_episodes=20,
                                      exploration_config=dict(epsilon_timesteps=10 ** 6, final_epsilon=1.0)))
    trainer.train()
    ev = trainer.evaluate()["evaluation"]
    lengths = ev["episode_len_mean"]
    assert ev["episodes_this_iter"] == 20 and 4.0 < lengths <= 12.0
    assert len(set(ev["hist_stats"]["episode_reward"])) == 2  # some reached the end, some were cut


def n_step_transitions(steps, n_step, gamma):
    """A plain reference: one env's logged steps -> its n-step transitions (cell, action,
    return of up to n rewards, gamma^k or 0 after a termination, cell n steps on)."""
    out = []
    for t in range(len(steps) - (n_step - 1)):  # the last n - 1 steps still wait for successors
        ret, scale, k = 0.0, 1.0, t
        while True:
            _, _, reward, terminated, truncated, _ = steps[k]
            ret += scale * reward
            scale = 0.0 if terminated else scale * gamma
            if terminated or truncated or k - t + 1 == n_step:
                break
            k += 1
        out.append((steps[t][0], steps[t][1], round(ret, 5), round(scale, 5), steps[k][5]))
    return out


@pytest.mark.parametrize("n_step, seeds", [(1, None), (3, None), (3, 3)])
def test_stored_transitions_are_the_envs_steps_with_n_step_returns(n_step, seeds):
    """Every env step the corridor logged becomes one stored n-step transition (one-hot cells,
    the return of up to n rewards, gamma^k, 0 after a termination) once its n steps are known.
    With vmapped seeds, seed k stores the steps of its own envs (the k-th block of
    num_envs_per_worker of the vector env) and no other's."""
    log, made = [], []
    gamma = 0.9

    def creator(config):
        made.append(Corridor({**config, "log": log}))
        return made[-1]

    jaxdqn.register_env("corridor-logged", creator)
    trainer = Trainer(corridor_config(env="corridor-logged", n_step=n_step, learning_starts=0,
                                      timesteps_per_iteration=64, gamma=gamma), num_seeds=seeds)
    trainer.train()
    stepping = [id(env) for env in made[1:]]  # made[0] is the probe that reads the spaces
    envs_per_seed = 2
    for k in range(seeds or 1):
        buffer = trainer.state.buffer["default_policy"]
        if seeds is not None:
            buffer = jax.tree_util.tree_map(lambda x: x[k], buffer)
        size = int(buffer.storage.size)
        stored = jax.tree_util.tree_map(lambda x: np.asarray(x[:size]), buffer.storage.storage)
        got = sorted(zip(stored.obs.argmax(1).tolist(), stored.action.tolist(),
                         np.round(stored.reward.astype(float), 5).tolist(),
                         np.round(stored.discount.astype(float), 5).tolist(), stored.next_obs.argmax(1).tolist()))
        expected = []
        for env_id in stepping[k * envs_per_seed:(k + 1) * envs_per_seed]:
            expected += n_step_transitions([e[1:] for e in log if e[0] == env_id], n_step, gamma)
        assert size == 64 and got == sorted(expected), k
    hostenv.ENV_CREATORS.pop("corridor-logged")


def test_vmapped_seeds_each_learn_and_are_evaluated():
    """num_seeds=3 on a host env: 3 x num_envs_per_worker envs, one vmapped learner; each seed's
    greedy policy walks right and its evaluation episodes take the corridor's 4 steps."""
    trainer = Trainer(corridor_config(evaluation_interval=20, evaluation_num_episodes=2, total_timesteps=4000),
                      num_seeds=3)
    results = [trainer.train() for _ in range(20)]
    assert [r["timesteps_total"] for r in results[-1]] == [4000] * 3
    for k in range(3):
        greedy = [trainer.compute_single_action(np.eye(5, dtype=np.float32)[c], explore=False, seed=k) for c in range(4)]
        assert greedy == [1, 1, 1, 1], k
        assert results[-1][k]["evaluation"]["hist_stats"]["episode_reward"] == [1.0, 1.0], k
        assert results[-1][k]["evaluation"]["episode_len_mean"] == 4.0, k


def test_results_come_at_rllibs_report_points_with_workers_in_processes():
    """num_workers=2: the envs step in processes of their own (Gymnasium's AsyncVectorEnv); the
    results come where RLlib's OncePerTimestepsElapsed passes them, as for a JAX env."""
    config = SimpleQConfig(env="gymnasium:CartPole-v1", num_workers=2, num_envs_per_worker=1,
                           rollout_fragment_length=8, learning_starts=300, timesteps_per_iteration=200,
                           buffer_size=1000, total_timesteps=2000)
    trainer = Trainer(config)
    ours = [trainer.train()["timesteps_total"] for _ in range(3)]
    s = trainer.plan.schedule
    assert ours == rllib_report_points(learning_starts=300, timesteps_per_iteration=200, steps_per_store=16,
                                       replay_counts=lambda k: 1, sampled=0, reports=3)
    assert trainer.train()["episodes_total"] > 0 and s.steps_per_store == 16


class ContinuousActions(Corridor):
    def __init__(self, config):
        super().__init__(config)
        self.action_space = spaces.Box(-1.0, 1.0, (1,))


class Broken(Corridor):
    def step(self, action):
        if self.t >= 3:
            raise RuntimeError("the simulator crashed")
        return super().step(action)


class NaNReward(Corridor):
    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float("nan"), terminated, truncated, info


@pytest.mark.parametrize("env, error, message", [
    (ContinuousActions, ValueError, "env='bad' has a Box action space: DQN needs a Discrete one"),
    (Broken, RuntimeError, "env='bad' failed in step: RuntimeError: the simulator crashed"),
    (NaNReward, ValueError, "env='bad' returned a non-finite reward in step"),
])
def test_a_bad_env_fails_with_one_error_naming_it(env, error, message):
    jaxdqn.register_env("bad", env)
    try:
        with pytest.raises(error, match=message):
            Trainer(corridor_config(env="bad", learning_starts=8)).train()
    finally:
        hostenv.ENV_CREATORS.pop("bad")


class DiesOnce(Corridor):
    """The worker process running it exits at its third step, the first time any env gets there
    (a marker file says whether one did)."""

    def step(self, action):
        marker = pathlib.Path(self.config_marker)
        if self.t == 2 and not marker.exists():
            marker.write_text("died")
            os._exit(3)
        return super().step(action)

    def __init__(self, config):
        super().__init__(config)
        self.config_marker = config["marker"]


@pytest.mark.parametrize("recreate", [False, True])
def test_a_dead_worker_process_is_recreated_or_stops_the_run_with_its_error(tmp_path, recreate):
    """A rollout worker process that dies: with recreate_failed_workers new processes start,
    every env begins a new episode and training goes on (a warning says so); without it the run
    stops with one error naming the env (never a hang)."""
    jaxdqn.register_env("dies", DiesOnce)
    config = corridor_config(env="dies", env_params={"marker": str(tmp_path / "marker")}, num_workers=2,
                             num_envs_per_worker=1, learning_starts=16, timesteps_per_iteration=40,
                             recreate_failed_workers=recreate)
    try:
        trainer = Trainer(config)
        if not recreate:
            with pytest.raises(RuntimeError, match="env='dies' failed in step: "):
                trainer.train()
            return
        with pytest.warns(RuntimeWarning, match="rollout workers were recreated"):
            results = [trainer.train() for _ in range(2)]
        assert (tmp_path / "marker").exists() and results[-1]["timesteps_total"] >= 80
        assert results[-1]["episodes_total"] > 0
    finally:
        hostenv.ENV_CREATORS.pop("dies")


def test_a_multiagent_section_on_a_single_agent_host_env_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="^multiagent is not supported with env='corridor': it is a single-agent env"):
        Trainer(corridor_config(multiagent={"policies": {"p0": {}}}))


def test_two_processes_step_their_own_envs_and_learn_as_one_process_would(tmp_path):
    """``jaxdqn train`` on Gymnasium's CartPole as 2 local processes x 2 CPU devices (gloo), data
    parallel: each process steps the envs of its own devices, reset with the seeds they have in
    one process holding all 4 devices, so the first iteration counts the same steps and episodes
    as that one process and its learner statistics agree to float tolerance (the all-reduce runs
    over gloo)."""
    from tests.test_parallel import train_in_two_processes

    config = dict(env="gymnasium:CartPole-v1", num_envs_per_worker=4, buffer_size=2000, learning_starts=64,
                  train_batch_size=16, timesteps_per_iteration=64, total_timesteps=256, hiddens=[16],
                  model={"fcnet_hiddens": [16]})
    results = train_in_two_processes(config, tmp_path)
    assert results[-1]["timesteps_total"] >= 256
    single = Trainer(DQNConfig(**{**config, "hiddens": (16,), "model": ModelConfig(fcnet_hiddens=(16,)),
                                  "num_devices": 4}))
    first = single.train()
    assert first["timesteps_total"] == results[0]["timesteps_total"]
    assert first["episodes_total"] == results[0]["episodes_total"] > 0
    assert first["hist_stats"]["episode_reward"] == results[0]["hist_stats"]["episode_reward"]
    mine = first["info"]["learner"]["default_policy"]["learner_stats"]
    theirs = results[0]["info"]["learner"]["default_policy"]["learner_stats"]
    assert theirs == pytest.approx(mine, rel=1e-4, abs=1e-6)


def stored_items(buffer):
    """A uniform buffer's stored transitions as sorted (cell, action, return, discount, next cell)."""
    size = int(buffer.storage.size)
    stored = jax.tree_util.tree_map(lambda x: np.asarray(x[:size]), buffer.storage.storage)
    return sorted(zip(stored.obs.argmax(1).tolist(), stored.action.tolist(),
                      np.round(stored.reward.astype(float), 5).tolist(),
                      np.round(stored.discount.astype(float), 5).tolist(), stored.next_obs.argmax(1).tolist()))


def test_data_parallel_devices_each_store_their_own_envs_steps():
    """num_devices=2 on a host env (4 forced CPU devices, conftest): the vector env's 4 envs are
    split in order, device d's replay shard holds exactly the n-step transitions of envs 2d and
    2d + 1, the learner (params, target, optimizer, counters) stays bitwise equal on both
    devices, and the counters count both devices' steps."""
    log, made = [], []

    def creator(config):
        made.append(Corridor({**config, "log": log}))
        return made[-1]

    jaxdqn.register_env("corridor-logged", creator)
    try:
        trainer = Trainer(corridor_config(env="corridor-logged", num_devices=2, num_envs_per_worker=4, n_step=3,
                                          learning_starts=0, timesteps_per_iteration=96, train_batch_size=16))
        result = trainer.train()
    finally:
        hostenv.ENV_CREATORS.pop("corridor-logged")
    stepping = [id(env) for env in made[1:]]  # made[0] is the probe that reads the spaces
    state = trainer.state
    for d in range(2):
        expected = []
        for env_id in stepping[2 * d:2 * d + 2]:
            expected += n_step_transitions([e[1:] for e in log if e[0] == env_id], 3, 0.9)
        shard = jax.tree_util.tree_map(lambda x: x[d], state.buffer["default_policy"])
        assert stored_items(shard) == sorted(expected), d
        assert int(shard.storage.size) == 48  # half of the 96 steps
    for leaf in jax.tree_util.tree_leaves((state.learner, state.metrics.num_steps_sampled,
                                           state.metrics.num_steps_trained)):
        assert np.array_equal(np.asarray(leaf)[0], np.asarray(leaf)[1])
    sampled = 96 + 2 * 4  # the stored steps and the n-step look-ahead's first 2 steps of the 4 envs
    assert result["timesteps_total"] == sampled and int(np.asarray(state.metrics.num_steps_sampled)[0]) == sampled


def test_seeds_on_devices_equal_seeds_on_one_device():
    """4 vmapped seeds of a host env spread over 2 devices learn what the same 4 seeds on one
    device learn (the envs are the same, in the same order)."""
    on_one = Trainer(corridor_config(train_batch_size=15), num_seeds=4)
    on_two = Trainer(corridor_config(train_batch_size=15, num_devices=2), num_seeds=4)
    a, b = on_one.train(), on_two.train()
    for x, y in zip(a, b):
        assert x["episode_reward_mean"] == pytest.approx(y["episode_reward_mean"], rel=1e-5)
        assert x["info"]["learner"]["default_policy"]["learner_stats"]["loss"] == pytest.approx(
            y["info"]["learner"]["default_policy"]["learner_stats"]["loss"], rel=1e-4)
    for x, y in zip(jax.tree_util.tree_leaves(on_one.params), jax.tree_util.tree_leaves(on_two.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)


def test_a_resumed_run_continues_on_new_episodes(tmp_path):
    """The envs' state is not checkpointed: after a resume they start new episodes (as RLlib's
    workers) and the look-ahead is primed again; learner, buffer and counters continue."""
    trainer = Trainer(corridor_config(n_step=2))
    trainer.train()
    path = trainer.save(tmp_path)
    sampled, stored = trainer.state.metrics.num_steps_sampled, int(trainer.state.buffer["default_policy"].storage.size)
    resumed = Trainer.from_checkpoint(path)
    result = resumed.train()
    # the look-ahead primed again (1 step of 2 envs), then 200 steps from there
    assert result["timesteps_total"] == int(sampled) + 2 + 200
    assert int(resumed.state.buffer["default_policy"].storage.size) == stored + 200


def guide_examples():
    """The Python blocks of the guide's section on host envs: a Gymnasium env, then a PettingZoo one."""
    import re

    text = (pathlib.Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    start = text.index("## Any Gymnasium env, or your own")
    return re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start + 1)], flags=re.S)


def test_the_guides_example_runs_as_written():
    code, _ = guide_examples()
    scope: dict = {}
    exec(compile(code, "docs/guide.md", "exec"), scope)
    assert scope["result"]["timesteps_total"] == 200 and scope["result"]["episodes_total"] > 0
    hostenv.ENV_CREATORS.pop("corridor", None)


def test_the_lunarlander_tuned_example_is_what_jaxdqn_train_runs_for_it():
    """`jaxdqn train --env LunarLander-v3` takes the shipped YAML (its learning threshold is a
    slow test): Gymnasium's Box2D env on the host, 4 envs in the trainer's process."""
    from jaxdqn.cli import documents
    from jaxdqn.config import from_dict

    name, document = documents.tuned_example("dqn", "LunarLander-v3")
    _, config, stop, _ = documents.document_to_spec(document, name)
    config = from_dict(config, "dqn")
    assert hostenv.is_host_env(config.env) and config.num_envs == 4 and config.num_workers == 0
    assert stop == {"episode_reward_mean": 200, "timesteps_total": 500_000}
    trainer = Trainer(config.replace(learning_starts=64, buffer_size=1000, timesteps_per_iteration=128))
    result = trainer.train()  # 2 primed steps (n_step 3) of 4 envs, then 8 stores of 16
    assert result["timesteps_total"] == 8 + 128 and trainer.plan.spec.num_actions == 4


def cartpole_next(obs, action):
    """Gymnasium's CartPole dynamics from ``obs`` (an independent reference for a transition)."""
    env = gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    env.state = np.asarray(obs, np.float64)
    return env.step(int(action))[0]


def test_envpool_steps_reach_the_buffer_as_the_physics_says():
    """`envpool:CartPole-v1`: EnvPool's batch with Gymnasium's same-step autoreset. Every stored
    transition follows CartPole's dynamics from its observation and action, the ones that end an
    episode included (their next observation is the episode's last, not the next one's first)."""
    trainer = Trainer(SimpleQConfig(env="envpool:CartPole-v1", num_envs_per_worker=3, learning_starts=0,
                                    timesteps_per_iteration=300, buffer_size=1000))
    result = trainer.train()
    buffer = trainer.state.buffer["default_policy"]  # SimpleQ's: uniform replay
    size = int(buffer.size)
    obs, action, discount, next_obs = (np.asarray(x[:size]) for x in (buffer.storage.obs, buffer.storage.action,
                                                                        buffer.storage.discount,
                                                                        buffer.storage.next_obs))
    assert size >= 300 and result["episodes_total"] >= 5 and (discount == 0).sum() >= 5
    expected = np.stack([cartpole_next(o, a) for o, a in zip(obs, action)])
    np.testing.assert_allclose(next_obs, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("env", ["envpool:Breakout-v5", "gymnasium:BreakoutNoFrameskip-v4"])
def test_atari_on_the_host_is_wrap_deepmind_with_whole_games_as_episodes(env):
    """EnvPool's Breakout with RLlib's wrap_deepmind options, and Gymnasium's ALE with
    jaxdqn.hostatari's wrap_deepmind: 84x84x4 uint8 frames channels-last through the conv stack,
    a lost life terminates (no bootstrap) while an episode is a whole game of 5 lives, and the
    learner stores clipped rewards while episode returns are the game's."""
    trainer = Trainer(DQNConfig(env=env, num_envs_per_worker=4, buffer_size=3000,
                                learning_starts=2000, timesteps_per_iteration=2400, train_batch_size=8,
                                model=ModelConfig(conv_filters=((4, 8, 4), (8, 4, 2)), fcnet_hiddens=(16,)),
                                hiddens=(16,)))
    assert trainer.plan.spec.obs_shape == (84, 84, 4) and trainer.plan.spec.num_actions == 4
    result = trainer.train()
    storage = trainer.state.buffer["default_policy"].storage
    size = int(storage.size)
    reward, discount = np.asarray(storage.storage.reward[:size]), np.asarray(storage.storage.discount[:size])
    assert result["episodes_total"] >= 1
    assert (discount == 0).sum() >= 4 * result["episodes_total"]  # 5 lives per game, the last one's too
    assert set(np.unique(reward)) <= {0.0, 1.0}


def test_a_dict_observation_is_flattened_without_its_text():
    """MiniGrid's Dict observation (a 7x7x3 view, a Discrete direction, a mission string),
    through Gymnasium's "<module>:<id>" form: the view's 147 values and the direction one-hot
    make the vector the network takes; the string is left out. The tuned example runs."""
    import minigrid  # noqa: F401 - registers its envs

    from jaxdqn.cli import documents
    from jaxdqn.config import from_dict

    host = hostenv.HostEnvs(DQNConfig(env="minigrid:MiniGrid-Empty-6x6-v0", num_envs_per_worker=2))
    env = gymnasium.make("MiniGrid-Empty-6x6-v0")
    first, _ = env.reset(seed=0)
    assert host.obs_shape == (7 * 7 * 3 + 4,)
    np.testing.assert_array_equal(host.obs[0], np.concatenate([np.eye(4)[first["direction"]],
                                                               first["image"].reshape(-1)]))
    host.close()
    name, document = documents.tuned_example("dqn", "minigrid:MiniGrid-Empty-6x6-v0")
    _, config, stop, _ = documents.document_to_spec(document, name)
    config = from_dict(config, "dqn")
    assert stop["episode_reward_mean"] == 0.9
    result = Trainer(config.replace(learning_starts=64, buffer_size=1000, timesteps_per_iteration=128)).train()
    assert result["timesteps_total"] == 8 + 128  # 2 primed steps (n_step 3) of 4 envs, then 8 stores of 16


def test_a_sweep_of_a_host_env_is_one_program_with_each_trials_values():
    """trials x seeds on a host env: 2 x 2 runs, each on its own block of envs; each run's
    learner steps at its trial's lr (the learner's cur_lr), and the trial that can learn does."""
    trainer = Trainer(corridor_config(), num_seeds=2, trials=[{"lr": 5e-3}, {"lr": 1e-4}])
    results = [trainer.train() for _ in range(15)]
    for t, lr in enumerate((5e-3, 1e-4)):
        for k in range(2):
            stats = results[-1][t][k]["info"]["learner"]["default_policy"]["learner_stats"]
            assert stats["cur_lr"] == pytest.approx(lr), (t, k)
            assert results[-1][t][k]["config"] == {"lr": lr}
    for k in range(2):
        greedy = [trainer.compute_single_action(np.eye(5, dtype=np.float32)[c], explore=False, seed=k, trial=0)
                  for c in range(4)]
        assert greedy == [1, 1, 1, 1], k


class Recall(gymnasium.Env):
    """A cue (0 or 1) at the first step, then ``delay`` blank steps; the last step pays 1 if the
    action is the cue: a feed-forward policy can only guess (0.5), a recurrent one remembers."""

    def __init__(self, config):
        self.delay = config.get("delay", 2)
        self.observation_space, self.action_space = spaces.Discrete(3), spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return self.cue, {}

    def step(self, action):
        self.t += 1
        done = self.t > self.delay
        return 2, float(action == self.cue) if done else 0.0, done, False, {}


@pytest.mark.parametrize("seeds, devices", [(None, 1), (2, 2)])
def test_a_recurrent_policy_on_a_host_env_remembers_what_a_feed_forward_one_cannot(seeds, devices):
    """R2D2-style DQN (model.use_lstm, stored sequences) on a host env: the LSTM learns to
    recall the cue (greedy evaluation returns 1 on every episode), where the same DQN
    without it stays at chance (at most 0.6 over its last 100 episodes). With 2 seeds on 2
    devices each seed's memory is carried on its own device and learns the same."""
    jaxdqn.register_env("recall", Recall)
    try:
        def config(lstm):
            return DQNConfig(env="recall", model=ModelConfig(use_lstm=lstm, lstm_cell_size=16, fcnet_hiddens=(16,),
                                                             max_seq_len=6),
                             replay_sequence_length=6 if lstm else 1, num_envs_per_worker=4, learning_starts=200,
                             timesteps_per_iteration=1000, buffer_size=4000, train_batch_size=16,
                             rollout_fragment_length=6, lr=3e-3, hiddens=(16,), gamma=0.9, evaluation_num_episodes=20,
                             exploration_config=dict(epsilon_timesteps=3000, final_epsilon=0.02))
        recurrent = Trainer(config(True).replace(num_devices=devices), num_seeds=seeds)
        for _ in range(8):
            recurrent.train()
        evaluations = recurrent.evaluate()
        for ev in evaluations if seeds else [evaluations]:
            assert ev["evaluation"]["hist_stats"]["episode_reward"] == [1.0] * 20
        feed_forward = Trainer(config(False))
        for _ in range(8):
            result = feed_forward.train()
        assert result["episode_reward_mean"] <= 0.6
    finally:
        hostenv.ENV_CREATORS.pop("recall")


def test_gymnasium_ale_frames_are_the_compiled_loops_frame_for_frame():
    """PongNoFrameskip-v4 through Gymnasium's ALE with jaxdqn.hostatari's wrap_deepmind and
    through the ALE's XLA env in the compiled loop (no no-op starts, where the ALE draws them
    differently): after the reset (FIRE, then action 2: two steps the compiled loop takes as
    invalid, its actions overridden) the stacked frames are equal, byte for byte, over 48 steps
    of the same actions, and so are the rewards."""
    from jaxdqn import envs, hostatari

    actions = [2, 3, 0, 2, 2, 3, 1, 0] * 6
    spec = envs.make_env("PongNoFrameskip-v4", {"noop_max": 0}, num_envs=1)
    key = jax.random.key(0)
    _, state = envs.reset(spec, jax.random.split(key, 1))
    compiled = []
    for i, a in enumerate([0, 0] + actions):
        out, state = envs.step(spec, jax.random.split(jax.random.fold_in(key, i), 1), state,
                               jax.numpy.array([a], jax.numpy.int32))
        compiled.append((np.asarray(out.obs[0]), float(out.reward[0]), bool(out.valid[0])))
    assert [v for *_, v in compiled[:3]] == [False, False, True]
    host = hostatari.wrap_deepmind("PongNoFrameskip-v4", {"noop_max": 0})
    first, _ = host.reset(seed=0)
    np.testing.assert_array_equal(first, compiled[1][0])
    for k, a in enumerate(actions):
        obs, reward, *_ = host.step(a)
        np.testing.assert_array_equal(obs, compiled[2 + k][0], err_msg=f"step {k}")
        assert reward == compiled[2 + k][1], k


@pytest.mark.parametrize("env", ["gymnasium:BreakoutNoFrameskip-v4", "envpool:Breakout-v5"])
def test_an_atari_evaluation_episode_is_the_whole_game(env):
    """Evaluation episodes on the host end where the game does, not at the first lost life: an
    agent that only fires plays as many steps as the same game played alone until its end
    (the ALE's lives at 0), for both Atari backends."""
    from jaxdqn import hostatari

    host = hostenv.HostEnvs(DQNConfig(env=env, num_envs_per_worker=1))
    returns, lengths, finished = host.episodes(lambda obs, t: np.ones(1, np.int32), 20_000, seed=3)
    host.close()
    if env.startswith("gymnasium:"):
        alone = hostatari.wrap_deepmind("BreakoutNoFrameskip-v4", {})
        alone.reset(seed=3)
        steps, over, lost = 0, False, 0
        while not over:
            _, _, terminated, truncated, info = alone.step(1)
            steps, over, lost = steps + 1, info["game_over"] or truncated, lost + bool(terminated)
            if terminated and not over:
                alone.reset()
    else:
        import envpool

        from jaxdqn.hostpool import ENVPOOL_ATARI

        alone = envpool.make_gymnasium("Breakout-v5", num_envs=1, seed=3, **ENVPOOL_ATARI)
        alone.reset()
        steps, over, lost = 0, False, 0
        while not over:
            _, _, terminated, truncated, info = alone.step(np.ones(1, np.int32))
            steps, over, lost = steps + 1, bool(info["terminated"][0] or truncated[0]), lost + bool(terminated[0])
    assert finished.tolist() == [True] and lengths.tolist() == [steps] and lost == 5
