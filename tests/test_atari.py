"""Atari through ale-py's XLA vector env: names, next-step autoreset (the reset step is no
transition), the Trainer storing only real transitions, evaluation, checkpoints, refusals and
RLlib's pong-dqn.yaml unchanged."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, Trainer, atari, buffers, cli, envs
from jaxdqn.cli import documents
from jaxdqn.config import atari_game

DATA = pathlib.Path(__file__).parent / "data" / "rllib"
SMALL = dict(env="PongNoFrameskip-v4", env_params={"img_height": 42, "img_width": 42}, num_envs_per_worker=2,
             rollout_fragment_length=4, train_batch_size=16, prioritized_replay=False, n_step=1,
             buffer_size=20_000, learning_starts=500, timesteps_per_iteration=1000, hiddens=(32,), dueling=False,
             model={"conv_filters": [[8, 4, 2], [16, 4, 2], [32, 11, 1]], "fcnet_hiddens": []},
             evaluation_num_episodes=2)


@pytest.mark.parametrize("name, game", [("PongNoFrameskip-v4", "pong"), ("BreakoutDeterministic-v4", "breakout"),
                                        ("ALE/SpaceInvaders-v5", "space_invaders"), ("Qbert-ALE", "qbert"),
                                        ("CartPole-v1", None), ("Breakout-MinAtar", None), ("Pong-v4", None)])
def test_atari_names(name, game):
    assert atari_game(name) == game
    if game is not None:  # -v5 is sticky, as gym's ALE/...-v5 (Machado et al.)
        assert atari.default_options(name)["repeat_action_probability"] == (0.25 if name.startswith("ALE/") else 0.0)


def test_the_step_after_an_episode_end_is_marked_as_no_transition():
    """ALE's next-step autoreset: the step after ``terminated`` ignores the action and starts the
    next episode (reward 0, not done); ``valid`` is False exactly there."""
    spec = envs.make_env("PongNoFrameskip-v4", {"img_height": 42, "img_width": 42}, num_envs=2)
    assert spec.obs_shape == (42, 42, 4) and spec.num_actions == 6
    obs, state = envs.reset(spec, jax.random.split(jax.random.key(0), 2))
    assert obs.shape == (2, 42, 42, 4) and obs.dtype == jnp.uint8

    def body(state, key):
        out, state = envs.step(spec, jax.random.split(key, 2), state, jax.random.randint(key, (2,), 0, 6))
        return state, (out.reward, out.terminated | out.truncated, out.valid)

    _, (reward, done, valid) = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 1500))
    reward, done, valid = map(np.asarray, (reward, done, valid))
    assert done.sum() >= 2, "random Pong ends an episode within 1500 steps"
    after_end = np.zeros_like(done)
    after_end[1:] = done[:-1]
    np.testing.assert_array_equal(valid, ~after_end)
    assert np.all(reward[after_end] == 0) and not np.any(done[after_end])
    assert set(np.unique(reward[valid])) <= {-1.0, 0.0, 1.0}


@pytest.mark.parametrize("episodic_life", [True, False])
def test_episodic_life_terminates_at_each_lost_life_and_scores_whole_games(episodic_life):
    """Breakout (5 lives), random play through the real ALE: with episodic life every lost life
    is a termination (the learner does not bootstrap across it) and the scored episode, ended at
    the ALE's reset step, is the whole game: 5 terminations per game; without it, 1."""
    spec = envs.make_env("BreakoutNoFrameskip-v4", {"img_height": 42, "img_width": 42, "episodic_life": episodic_life},
                         num_envs=2)
    _, state = envs.reset(spec, jax.random.split(jax.random.key(0), 2))

    def body(state, key):
        out, state = envs.step(spec, jax.random.split(key, 2), state, jax.random.randint(key, (2,), 0, 4))
        return state, (out.terminated | out.truncated, out.valid, out.episode_end, out.reward)

    _, (done, valid, end, reward) = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 1500))
    done, valid, end, reward = map(np.asarray, (done, valid, end, reward))
    np.testing.assert_array_equal(valid, ~end)  # the reset step is the game's end, and no transition
    after_done = np.zeros_like(done)
    after_done[1:] = done[:-1]
    assert not np.any(end & ~after_done) and np.all(reward[end] == 0)  # a reset follows a termination
    for env in range(2):
        ends = np.flatnonzero(end[:, env])
        assert len(ends) >= 2, "random Breakout ends a game within 1500 steps"
        per_game = [int(done[a + 1:b, env].sum()) for a, b in zip(ends[:-1], ends[1:])]
        assert per_game == [5 if episodic_life else 1] * len(per_game), per_game


def test_trainer_stores_only_real_transitions_and_scores_whole_episodes(tmp_path):
    trainer = Trainer(DQNConfig(**SMALL))
    for _ in range(2):
        result = trainer.train()
    state = trainer.state
    sampled = int(state.metrics.num_steps_sampled)
    ended = int(state.metrics.episodes.episodes_total)
    assert ended >= 1, result
    # Every env step is one transition (n_step 1), except the reset step that ends each game.
    assert int(buffers.size(state.buffer["default_policy"])) == sampled - ended
    # Pong scores: -21..21 per game, unclipped (clipping applies to what is stored).
    assert -21 <= result["episode_reward_mean"] <= 21 and result["episode_len_mean"] > 100
    stored = state.buffer["default_policy"].items.storage.transition  # frames stored once: references
    assert float(jnp.max(jnp.abs(stored.reward))) <= 1.0
    evaluation = trainer.evaluate()["evaluation"]
    assert evaluation["episodes_this_iter"] == 2 and -21 <= evaluation["episode_reward_mean"] <= 21
    path = trainer.save(tmp_path / "ckpt")
    restored = Trainer(DQNConfig(**SMALL))
    restored.restore(path)
    assert int(restored.state.metrics.num_steps_sampled) == sampled
    assert not bool(jnp.any(restored.state.actor.pending.acted))  # the look-ahead spans no cut
    after = restored.train()
    assert after["timesteps_total"] > sampled


def test_what_an_ale_batch_cannot_do_is_refused():
    with pytest.raises(ValueError, match="one ALE batch of games.*one seed per process"):
        Trainer(DQNConfig(**SMALL), num_seeds=2)
    with pytest.raises(ValueError, match="model.use_lstm is not supported"):
        Trainer(DQNConfig(**{**SMALL, "model": {"use_lstm": True}}))
    with pytest.raises(ValueError, match=r"\['frame_skip'\] are not ALE options; valid: .*frameskip"):
        envs.make_env("PongNoFrameskip-v4", {"frame_skip": 4})
    with pytest.raises(ValueError, match="ALE has no game 'no_such_game'"):
        envs.make_env("NoSuchGameNoFrameskip-v4")


@pytest.mark.slow  # its 10k warm-up steps take a minute on 2 cores
def test_rllib_pong_dqn_yaml_runs_unchanged(tmp_path):
    """RLlib's pong-dqn.yaml (PongDeterministic-v4, 42x42 frames, prioritized replay, its stop
    block with time_total_s) through ``jaxdqn train --config``."""
    assert cli.main(["train", "--config", str(DATA / "pong-dqn.yaml"), "--timesteps", "500", "--out", str(tmp_path),
                     "--quiet"]) == 0
    params = json.loads((tmp_path / "params.json").read_text())
    assert params["env"] == "PongDeterministic-v4" and params["env_params"] == {"img_height": 42, "img_width": 42}
    assert params["learning_starts"] == 10_000 and params["buffer_size"] == 50_000 and params["prioritized_replay"]
    result = json.loads((tmp_path / "result.json").read_text().splitlines()[-1])
    assert result["timesteps_total"] >= 10_500


def test_rllib_atari_duel_ddqn_yaml_is_one_program_per_game_and_its_replay_is_sized_first(tmp_path, capsys,
                                                                                          monkeypatch):
    """RLlib's atari-duel-ddqn.yaml, unchanged: its env grid_search is four games, each a program
    of its own with RLlib's dueling double-Q settings. Its replay of 1M transitions holds each
    84x84 frame once (about 7 GB, not the 56 GB of two 84x84x4 stacks per transition), and is
    checked against memory before anything is allocated or compiled; the test fixes the memory
    so that the outcome does not depend on the machine."""
    from jaxdqn import resources, sweep
    from jaxdqn.buffers import frames

    doc = documents.read_yaml(str(DATA / "atari-duel-ddqn.yaml"))
    algo, variants, _, _, _ = documents.document_variants(doc, "atari-duel-ddqn.yaml")
    assert [v["env"] for v, _ in variants] == ["BreakoutNoFrameskip-v4", "BeamRiderNoFrameskip-v4",
                                               "QbertNoFrameskip-v4", "SpaceInvadersNoFrameskip-v4"]
    _, config = variants[0]
    expected = dict(double_q=True, dueling=True, num_atoms=1, noisy=False, prioritized_replay=False,
                    buffer_size=1_000_000, learning_starts=20_000, n_step=1, target_network_update_freq=8000,
                    lr=0.0000625, adam_epsilon=0.00015, hiddens=[512], rollout_fragment_length=4,
                    train_batch_size=32, timesteps_per_iteration=10_000)
    assert {k: config[k] for k in expected} == expected
    assert config["exploration_config"]["epsilon_timesteps"] == 200_000
    assert config["exploration_config"]["final_epsilon"] == 0.01
    configs = [DQNConfig(**c) for _, c in variants]
    assert sweep.group_trials(configs) == [[0], [1], [2], [3]]

    envs_ = configs[0].num_envs
    rows = frames.ring_steps(1_000_000, envs_, 4, 1, 4) * envs_  # one 84x84 frame (+ its depth) per env step
    replay = rows * (84 * 84 + 4) + 1_000_000 * 6 * 4  # and six 4-byte leaves per transition
    assert replay < 56e9 / 7.5
    limit = 4 * 2**30
    monkeypatch.setattr(resources, "available_memory", lambda device: (limit, "test memory"))
    assert cli.main(["train", "--config", str(DATA / "atari-duel-ddqn.yaml"), "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "buffer_size=1000000 (RLlib's replay_buffer_config.capacity) does not fit" in err
    needed = float(err.split("replay storage")[0].split("(")[-1].split(" GiB")[0])
    assert needed == pytest.approx(replay / 2**30, abs=0.05)
    fits = int(err.split("lower buffer_size to about ")[1].split()[0])
    assert 0.9 * limit / (replay / 1e6) < fits < limit / (replay / 1e6)
    assert not list(tmp_path.iterdir())  # nothing started: no trial folder, no checkpoint
    # The size it names does fit (the check alone: nothing is allocated).
    Trainer(configs[0].replace(buffer_size=fits, evaluation_num_episodes=1))


@pytest.mark.slow  # two ALE programs compile and run: a minute on 2 cores
def test_a_sweep_over_atari_games_runs_each_game_as_its_own_program(tmp_path, capsys):
    """An env grid_search over two games (as atari-duel-ddqn.yaml's, at a size this test affords):
    two programs run in turn, each trial in its Tune folder with its own game's results."""
    import csv

    import yaml

    doc = {**SMALL, "env": {"grid_search": ["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"]},
           "model": {**SMALL["model"]}, "evaluation_num_episodes": 1}
    path = tmp_path / "games.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "exp"
    assert cli.main(["train", "--config", str(path), "--timesteps", "1000", "--out", str(out)]) == 0
    assert "2 trials x 1 seed(s) as 2 program(s)" in capsys.readouterr().err
    with open(out / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [r["env"] for r in summary] == ["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"]
    assert summary[0]["checkpoint"] != summary[1]["checkpoint"]  # one program (and checkpoint) each
    for r in summary:
        params = json.loads((out / r["trial"] / "params.json").read_text())
        assert params["env"] == r["env"]
        result = json.loads((out / r["trial"] / "result.json").read_text().splitlines()[-1])
        assert result["timesteps_total"] >= 1000
