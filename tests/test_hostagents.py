"""Multi-agent envs on the host: PettingZoo parallel envs registered by name (or named
``pettingzoo:<module>``) train through the multi-agent plan (jaxdqn.hostagents)."""

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.classic import rps_v2

import jaxdqn
from jaxdqn import DQNConfig, Trainer, hostenv
from tests.test_hostenv import corridor_config, guide_examples, n_step_transitions


class Corridors(ParallelEnv):
    """One corridor per agent (``lengths``: agent -> cells), every agent starting at cell 0;
    action 1 steps right, 0 left; an agent earns 1 and terminates on reaching its last cell, and
    is truncated after ``limit`` steps. Observations: the agent's cell, Discrete (one-hot for the
    network). ``log`` records every agent step (and every reset) of every instance."""

    metadata = {"name": "corridors"}

    def __init__(self, config):
        self.lengths = dict(config.get("lengths", {"left": 5, "right": 5}))
        self.limit, self.log = config.get("limit", 12), config.get("log")
        self.possible_agents = list(self.lengths)

    def observation_space(self, agent):
        return spaces.Discrete(self.lengths[agent])

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        self.cell = {a: 0 for a in self.agents}
        if self.log is not None:
            self.log.append((id(self), "reset"))
        return dict(self.cell), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rewards, terminated, truncated = {}, {}, {}, {}
        for a, action in actions.items():
            before = self.cell[a]
            self.cell[a] = min(max(before + (1 if action == 1 else -1), 0), self.lengths[a] - 1)
            terminated[a] = self.cell[a] == self.lengths[a] - 1
            truncated[a] = not terminated[a] and self.t >= self.limit
            obs[a], rewards[a] = self.cell[a], 1.0 if terminated[a] else 0.0
            if self.log is not None:
                self.log.append((id(self), a, before, int(action), rewards[a], terminated[a], truncated[a], obs[a]))
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in actions}


class BoxActions(Corridors):
    def action_space(self, agent):
        return spaces.Box(-1.0, 1.0, (1,)) if agent == "right" else spaces.Discrete(2)


def config(**overrides):
    """The single-agent corridor tests' config, on the corridors."""
    return corridor_config(**{"env": "corridors", **overrides})


TWO_POLICIES = {"policies": {"p_left": {}, "p_right": {}}, "policy_mapping_fn": {"left": "p_left", "right": "p_right"}}


@pytest.fixture(autouse=True)
def corridors():
    for name, env in (("corridors", Corridors), ("box-actions", BoxActions), ("rps-aec", lambda c: rps_v2.env())):
        jaxdqn.register_env(name, env)
    yield
    for name in ("corridors", "box-actions", "rps-aec", "corridors-logged"):
        hostenv.ENV_CREATORS.pop(name, None)


def greedy_walks(trainer, policy_id, length, seed=None):
    kwargs = {} if seed is None else {"seed": seed}
    return [trainer.compute_single_action(np.eye(length, dtype=np.float32)[c], explore=False, policy_id=policy_id,
                                          **kwargs) for c in range(length - 1)]


def test_a_pettingzoo_env_of_a_few_lines_learns_a_policy_per_agent(tmp_path):
    """A user's PettingZoo parallel env, registered by name, with one policy per agent: each
    policy's greedy actions walk its corridor, the joint episode (RLlib's, ended when both
    agents' have) earns 2, each policy's agent 1, and the evaluation's greedy episodes take the
    longer corridor's steps. A checkpoint resumes on new episodes."""
    trainer = Trainer(config(env_params={"lengths": {"left": 3, "right": 5}}, multiagent=TWO_POLICIES,
                             evaluation_interval=15, evaluation_num_episodes=2))
    results = [trainer.train() for _ in range(15)]
    assert greedy_walks(trainer, "p_left", 3) == [1, 1] and greedy_walks(trainer, "p_right", 5) == [1, 1, 1, 1]
    last = results[-1]
    assert last["episode_reward_mean"] == 2.0 and last["policy_reward_mean"] == {"p_left": 1.0, "p_right": 1.0}
    assert 4.0 <= last["episode_len_mean"] < 5.0
    assert last["evaluation"]["hist_stats"]["episode_reward"] == [2.0, 2.0]
    assert last["evaluation"]["episode_len_mean"] == 4.0
    resumed = Trainer.from_checkpoint(trainer.save(tmp_path))
    after = resumed.train()
    assert after["timesteps_total"] == last["timesteps_total"] + 200 and after["episode_reward_mean"] == 2.0


def agent_transitions(log, done_when, n_step, gamma):
    """A plain reference: each agent's stored n-step transitions from the logged steps of every
    env instance. A joint episode ends at a reset; with done_when='any' the agents whose own
    episode had not ended there are truncated at that step."""
    expected = {}
    for env_id in dict.fromkeys(e[0] for e in log):
        entries = [e[1:] for e in log if e[0] == env_id]
        episodes, current = [], None
        for e in entries:
            if e[0] == "reset":
                current = []
                episodes.append(current)
            else:
                current.append(e)
        for agent in ("left", "right"):
            steps = []
            for i, episode in enumerate(episodes):
                mine = [list(e[1:]) for e in episode if e[0] == agent]
                ended = i < len(episodes) - 1  # a later reset ended this joint episode
                if mine and ended and done_when == "any" and not mine[-1][3]:
                    mine[-1][4] = True  # truncated at the joint end
                steps += [tuple(s) for s in mine]
            if done_when == "any":  # every env step is every agent's: the last n - 1 wait for successors
                expected.setdefault(agent, []).extend(n_step_transitions(steps, n_step, gamma))
            else:  # n = 1: every step the agent took is stored
                expected.setdefault(agent, []).extend(n_step_transitions(steps, 1, gamma))
    return expected


@pytest.mark.parametrize("done_when, n_step", [("all", 1), ("any", 3)])
def test_each_agents_stored_transitions_are_its_steps(done_when, n_step):
    """Every step an agent took becomes one transition in its policy's buffer (one-hot cells,
    the n-step return, gamma^k, 0 after a termination): with done_when='all' an agent that has
    reached its end stops acting while the other plays on, and stores nothing until the joint
    episode ends; with 'any' the joint episode ends at the first arrival and the other agent's
    last step bootstraps (truncated)."""
    log, gamma = [], 0.9
    jaxdqn.register_env("corridors-logged", lambda c: Corridors({**c, "log": log}))
    trainer = Trainer(config(env="corridors-logged", n_step=n_step, learning_starts=0, timesteps_per_iteration=64,
                             env_params={"lengths": {"left": 3, "right": 5}, "done_when": done_when},
                             multiagent=TWO_POLICIES))
    trainer.train()
    expected = agent_transitions(log, done_when, n_step, gamma)  # (the probe that read the spaces never reset)
    for agent, pid in (("left", "p_left"), ("right", "p_right")):
        buffer = trainer.state.buffer[pid]
        size = int(buffer.storage.size)
        stored = {k: np.asarray(v[:size]) for k, v in buffer.storage.storage._asdict().items()}
        got = sorted(zip(stored["obs"].argmax(1).tolist(), stored["action"].tolist(),
                         np.round(stored["reward"].astype(float), 5).tolist(),
                         np.round(stored["discount"].astype(float), 5).tolist(), stored["next_obs"].argmax(1).tolist()))
        assert got == sorted(expected[agent]), agent
        if done_when == "all":  # the left agent finishes first and sits out the rest of the joint episode
            assert len(expected["left"]) < len(expected["right"])


def test_pettingzoo_modules_run_by_name_and_zero_sum_games_sum_to_zero():
    """``pettingzoo:<module>`` is the module's parallel_env (rock-paper-scissors here): its two
    players' rewards cancel every step, so the joint return is 0 while each player's is its own;
    an episode is the game's 15 rounds (rps_v2's max_cycles)."""
    assert hostenv.is_host_env("pettingzoo:pettingzoo.classic.rps_v2")
    trainer = Trainer(DQNConfig(env="pettingzoo:pettingzoo.classic.rps_v2", num_envs_per_worker=4, learning_starts=100,
                                timesteps_per_iteration=400, total_timesteps=800,
                                multiagent={"policies": {"a": {}, "b": {}},
                                            "policy_mapping_fn": {"player_0": "a", "player_1": "b"}}))
    result = trainer.train()
    assert result["episode_len_mean"] == 15.0 and result["episode_reward_mean"] == 0.0
    returns = result["hist_stats"]
    assert result["policy_reward_mean"]["a"] == pytest.approx(-result["policy_reward_mean"]["b"], abs=1e-6)
    assert "episode_reward" in returns and result["episodes_this_iter"] > 0


def test_lockstep_replay_with_workers_in_processes_and_vmapped_seeds():
    """replay_mode='lockstep' (one buffer of joint steps, done_when='any'), the envs in a worker
    process (Gymnasium's AsyncVectorEnv of joint envs) and two vmapped seeds: each seed's shared
    policy learns to walk, its greedy evaluation earns 2 in 4 steps."""
    c = config(num_workers=1, prioritized_replay=False, env_params={"done_when": "any"},
               multiagent={"policies": {"shared": {}}, "replay_mode": "lockstep"})
    trainer = Trainer(c, num_seeds=2)
    for _ in range(12):
        trainer.train()
    for k in range(2):
        assert greedy_walks(trainer, "shared", 5, seed=k) == [1, 1, 1, 1], k
    evaluations = trainer.evaluate()
    assert [e["evaluation"]["hist_stats"]["episode_reward"] for e in evaluations] == [[2.0] * 10] * 2
    assert [e["evaluation"]["episode_len_mean"] for e in evaluations] == [4.0, 4.0]


@pytest.mark.parametrize("env, changes, error, message", [
    ("box-actions", {}, ValueError, "env='box-actions' agent 'right' has a Box action space: DQN needs a Discrete one"),
    ("rps-aec", {}, ValueError, "env='rps-aec' is a PettingZoo AEC env"),
    ("corridors", {"env_params": {"done_when": "never"}}, ValueError, "env_params done_when='never' is invalid"),
    ("corridors", {"multiagent": {"policies": {"p": {}}, "policy_mapping_fn": {"left": "p"}}}, ValueError,
     "multiagent.policy_mapping_fn={'left': 'p'} is invalid: does not map the agents \\['right'\\]"),
])
def test_a_bad_multi_agent_env_fails_with_one_error_naming_it(env, changes, error, message):
    with pytest.raises(error, match=message):
        Trainer(config(env=env, **changes))


def test_done_when_is_refused_for_a_single_agent_env():
    jaxdqn.register_env("single", lambda c: __import__("tests.test_hostenv", fromlist=["Corridor"]).Corridor(c))
    try:
        with pytest.raises(ValueError, match="env_params done_when is for multi-agent envs; env='single'"):
            Trainer(config(env="single", env_params={"done_when": "all"}))
    finally:
        hostenv.ENV_CREATORS.pop("single")


def test_the_guides_pettingzoo_example_runs_as_written():
    _, code = guide_examples()
    scope: dict = {}
    try:
        exec(compile(code, "docs/guide.md", "exec"), scope)
    finally:
        hostenv.ENV_CREATORS.pop("corridors", None)
    result = scope["result"]
    assert result["timesteps_total"] == 200 and set(result["policy_reward_mean"]) == {"p_left", "p_right"}
