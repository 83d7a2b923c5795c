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
from jaxdqn.plan import make_plan, make_train

DATA = pathlib.Path(__file__).parent / "data" / "rllib"
SMALL = dict(env="PongNoFrameskip-v4", env_params={"img_height": 42, "img_width": 42}, num_envs_per_worker=2,
             rollout_fragment_length=4, train_batch_size=16, prioritized_replay=False, n_step=1,
             buffer_size=20_000, learning_starts=500, timesteps_per_iteration=1000, hiddens=(32,), dueling=False,
             model={"conv_filters": [[8, 4, 2], [16, 4, 2], [32, 11, 1]], "fcnet_hiddens": []},
             evaluation_num_episodes=2)


@pytest.mark.parametrize("name, game, maxpool, frames", [
    ("PongNoFrameskip-v4", "pong", True, 400_000), ("BreakoutDeterministic-v4", "breakout", False, 400_000),
    ("ALE/SpaceInvaders-v5", "space_invaders", False, 108_000), ("Qbert-ALE", "qbert", True, 108_000),
    ("CartPole-v1", None, None, None), ("Breakout-MinAtar", None, None, None), ("Pong-v4", None, None, None)])
def test_atari_names(name, game, maxpool, frames):
    """Per gym id, as RLlib's wrap_deepmind over gym's registrations: max-pooling only where RLlib
    skips frames itself (NoFrameskip; ours is DeepMind's), gym's episode caps (-v4: 400k frames,
    NoFrameskip's 400k steps or Deterministic's 100k of 4 frames; -v5 108k)."""
    assert atari_game(name) == game
    if game is not None:  # -v5 is sticky, as gym's ALE/...-v5 (Machado et al.)
        options = atari.default_options(name)
        assert options["repeat_action_probability"] == (0.25 if name.startswith("ALE/") else 0.0)
        assert (options["maxpool"], options["max_num_frames_per_episode"]) == (maxpool, frames)


def reset_steps(done, end, *, life_lost=None, fire=True):
    """Where a no-op-free FIRE game's steps are reset steps (plain numpy, RLlib's wrappers):
    FIRE and 2 at the start, the autoreset step after a game's end and FIRE, 2 after it, and
    after a lost life (``life_lost``: a termination that is not the game's end) a no-op, FIRE, 2."""
    steps, num_envs = done.shape
    expected = np.zeros_like(done)
    for e in range(num_envs):
        t, program = 0, 2 if fire else 0
        while t < steps:
            if program:
                expected[t, e] = True
                program -= 1
            elif end[t, e]:
                expected[t, e] = True
                program = 2 if fire else 0
            if done[t, e] and life_lost is not None and life_lost[t, e]:
                program = 3 if fire else 1
            t += 1
    return expected


def test_the_reset_steps_are_marked_as_no_transition():
    """ALE's next-step autoreset: the step after a game's end ignores the action and starts the
    next game (reward 0, not done); FIRE and 2 follow (RLlib's FireResetEnv). ``valid`` is
    False exactly at those steps."""
    spec = envs.make_env("PongNoFrameskip-v4", {"img_height": 42, "img_width": 42}, num_envs=2)
    assert spec.obs_shape == (42, 42, 4) and spec.num_actions == 6
    obs, state = envs.reset(spec, jax.random.split(jax.random.key(0), 2))
    assert obs.shape == (2, 42, 42, 4) and obs.dtype == jnp.uint8

    def body(state, key):
        out, state = envs.step(spec, jax.random.split(key, 2), state, jax.random.randint(key, (2,), 0, 6))
        return state, (out.reward, out.terminated | out.truncated, out.valid, out.episode_end)

    _, (reward, done, valid, end) = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 1500))
    reward, done, valid, end = map(np.asarray, (reward, done, valid, end))
    assert done.sum() >= 2, "random Pong ends an episode within 1500 steps"
    after_end = np.zeros_like(done)
    after_end[1:] = done[:-1]
    np.testing.assert_array_equal(end, after_end)
    np.testing.assert_array_equal(valid, ~reset_steps(done, end))
    assert np.all(reward[after_end] == 0) and not np.any(done[after_end])
    assert set(np.unique(reward[valid])) <= {-1.0, 0.0, 1.0}


@pytest.mark.parametrize("episodic_life", [True, False])
def test_episodic_life_terminates_at_each_lost_life_and_scores_whole_games(episodic_life):
    """Breakout (5 lives), random play through the real ALE: with episodic life every lost life
    is a termination (the learner does not bootstrap across it), followed by a no-op, FIRE and
    2 (RLlib's EpisodicLifeEnv and FireResetEnv), and the scored episode, ended at the ALE's reset
    step, is the whole game: 5 terminations per game; without it, 1."""
    spec = envs.make_env("BreakoutNoFrameskip-v4", {"img_height": 42, "img_width": 42, "episodic_life": episodic_life},
                         num_envs=2)
    _, state = envs.reset(spec, jax.random.split(jax.random.key(0), 2))

    def body(state, key):
        out, state = envs.step(spec, jax.random.split(key, 2), state, jax.random.randint(key, (2,), 0, 4))
        return state, (out.terminated | out.truncated, out.valid, out.episode_end, out.reward)

    _, (done, valid, end, reward) = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 1500))
    done, valid, end, reward = map(np.asarray, (done, valid, end, reward))
    after_done = np.zeros_like(done)
    after_done[1:] = done[:-1]
    assert not np.any(end & ~after_done) and np.all(reward[end] == 0)  # a reset follows a termination
    game_over = np.zeros_like(done)
    game_over[:-1] = end[1:]
    np.testing.assert_array_equal(valid, ~reset_steps(done, end, life_lost=(done & ~game_over) if episodic_life
                                                       else None))
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
    # Every env step is one transition (n_step 1), except the reset steps: FIRE and 2 at each
    # game's start, and the autoreset step that ends each game (the last game's may be cut).
    unstored = 2 * SMALL["num_envs_per_worker"] + 3 * ended
    assert sampled - unstored - 2 <= int(buffers.size(state.buffer["default_policy"])) <= sampled - unstored
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


def test_seeds_and_trials_play_one_ale_batch_as_separate_runs_would(tmp_path):
    """``num_seeds=S`` (and a sweep's trials): one ALE batch of ``runs x num_envs`` games, run
    ``r`` playing games ``r * num_envs ..``; each of ``2 trials x 2 seeds`` stores the frames and
    counts the steps and episodes that a run of its key alone does (epsilon 1, so that float
    rounding in the vmapped network cannot flip an action and the trials' learning rates do not
    change what is played), and the trial with the config's learning rate learns the same to
    float rounding (the other does not). Evaluation and a restore play each run's own games too."""
    config = DQNConfig(**{**SMALL, "timesteps_per_iteration": 400, "learning_starts": 200,
                          "evaluation_num_episodes": 1, "hiddens": (16,),  # a small network: compiles fast
                          "model": {"conv_filters": [[4, 6, 6]], "fcnet_hiddens": []},
                          "exploration_config": {"initial_epsilon": 1.0, "final_epsilon": 1.0}})
    trials, seeds = [{"seed": 1}, {"seed": 2, "lr": config.lr / 4}], 2
    trainer = Trainer(config, num_seeds=seeds, trials=trials)
    results = trainer.train()
    stored = trainer.state.buffer["default_policy"]  # the frames and what refers to them, [4, ...]
    plan = make_plan(config)
    start, chunk = jax.jit(plan.start), jax.jit(plan.chunk)
    for t, trial in enumerate(trials):
        for k in range(seeds):
            state, report = chunk(start(jax.random.split(jax.random.key(trial["seed"]), seeds)[k]))
            alone = state.buffer["default_policy"]
            for x, y in zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(stored), strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y[t * seeds + k]))
            assert results[t][k]["timesteps_total"] == int(report["num_steps_sampled"])
            assert results[t][k]["episodes_total"] == int(report["episodes_total"])
            loss = results[t][k]["info"]["learner"]["default_policy"]["learner_stats"]["loss"]
            # Adam's normalised steps carry the vmapped convolutions' and the traced learning
            # rate's rounding through 50 SGD steps: ~1e-4 apart; a quarter of the rate: >10%.
            assert (loss == pytest.approx(float(report["learner/default_policy/loss"]), rel=2e-3)) == (t == 0)
    frames = np.asarray(stored.frames)
    assert frames.shape[0] == 4 and not np.array_equal(frames[0], frames[1]), "two seeds play different games"
    evaluations = trainer.evaluate()
    assert [len(e) for e in evaluations] == [seeds, seeds]
    assert all(-21 <= e["evaluation"]["episode_reward_mean"] <= 21 for one in evaluations for e in one)
    path = trainer.save(tmp_path / "ckpt")
    restored = Trainer(config, num_seeds=seeds, trials=trials)
    restored.restore(path)
    after = restored.train()
    assert [[r["timesteps_total"] for r in one] for one in after] == [
        [r["timesteps_total"] + 400 for r in one] for one in results]


def test_a_vmapped_make_train_sizes_its_ale_batch_by_num_runs():
    config = DQNConfig(**{**SMALL, "total_timesteps": 1000})
    keys = jax.random.split(jax.random.key(0), 3)
    state, _ = jax.eval_shape(jax.vmap(make_train(config, num_runs=3)), keys)
    assert state.buffer["default_policy"].frames.shape[0] == 3
    with pytest.raises(ValueError, match="holds the games of 1 vmapped runs, not 3"):
        jax.eval_shape(jax.vmap(make_train(config)), keys)


def test_what_an_ale_batch_cannot_do_is_refused():
    with pytest.raises(ValueError, match=r"one ALE batch of games.*one device \(num_devices=1, not 2\)"):
        Trainer(DQNConfig(**{**SMALL, "num_devices": 2}), num_seeds=2)
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
    assert replay < 56e9 / 7
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


@pytest.mark.parametrize("name", ["BreakoutNoFrameskip-v4", "BreakoutDeterministic-v4"])
def test_breakout_matches_rllibs_deepmind_wrappers_over_the_raw_ale(name):
    """Random play in Breakout against a plain-Python twin of RLlib's ``wrap_deepmind``
    (tests/reference/rllib_atari.py) on the raw ALE, at the screen's own size: every observation
    the agent acts on (stacks refilled with copies after each reset and lost life; max-pooled
    only for NoFrameskip), every reward and termination of its steps, and each game's score (the
    reset steps' rewards included) agree exactly; FIRE after every lost life keeps the games
    going (RLlib's FireResetEnv). Deterministic's no-ops are steps, drawn 1..30 by the env: the
    twin takes the drawn counts; NoFrameskip's are raw frames drawn by the ALE: 0 here."""
    from tests.reference.rllib_atari import wrap_deepmind

    deterministic = "Deterministic" in name
    spec = envs.make_env(name, {"img_height": 210, "img_width": 160, "noop_max": 30 if deterministic else 0},
                         num_envs=1)
    keys = jax.random.split(jax.random.key(3), 1)
    seed = int((jax.random.key_data(keys)[0, 0] >> 1).astype(jnp.int32))
    steps = 700
    actions = np.random.default_rng(0).integers(0, spec.num_actions, (steps, 1)).astype(np.int32)

    def body(carry, xs):
        obs, state = carry
        action, key = xs
        out, state = envs.step(spec, key[None], state, action)
        return (out.obs, state), (obs, out.reward, out.terminated, out.truncated, out.valid, out.episode_end,
                                  state.forced)

    obs, state = envs.reset(spec, keys)
    _, outs = jax.jit(lambda c, a: jax.lax.scan(body, c, a))(
        (obs, state), (jnp.asarray(actions), jax.random.split(jax.random.key(4), steps)))
    acted_on, reward, terminated, truncated, valid, end, forced = (np.asarray(x)[:, 0] for x in outs)
    assert not truncated.any()
    # The no-op steps of each game: its reset steps less FIRE and 2 (at the start, after each end).
    noops = [int(state.forced[0]) - 2] + [int(f) - 2 for f in forced[end]]
    if deterministic:
        assert all(1 <= n <= 30 for n in noops) and len(set(noops)) > 1, noops
    else:
        assert noops == [0] * len(noops)

    twin, raw = wrap_deepmind("breakout", seed, noops=iter(noops), deterministic=deterministic)
    lives_env = twin.env.env  # FrameStack -> FireReset -> EpisodicLife
    expected = twin.reset()
    scores, ours, running = [], [], 0.0
    for t in range(steps):
        running += reward[t]
        if end[t]:
            ours.append(running - reward[t])
            running = reward[t]
        if not valid[t]:
            continue
        np.testing.assert_array_equal(acted_on[t], expected, err_msg=f"step {t}")
        expected, r, done = twin.step(int(actions[t, 0]))
        assert (reward[t], terminated[t]) == (r, done), t
        if done:
            if lives_env.was_real_done:
                scores.append(raw.score)
            expected = twin.reset()
    assert terminated.sum() >= 10 and len(scores) >= 2  # lives lost and games over, play went on
    assert ours == scores[:len(ours)] and len(ours) >= 2
