"""Env steps per second on Gymnasium envs that step on the host: jaxdqn against stable-baselines3's
DQN and sbx's DQN, at one shared config.

The shared config is stable-baselines3's DQN step pattern, which is also RLlib's SimpleQ at its
defaults: ``--envs`` Gymnasium envs in the learner's process (sb3's ``DummyVecEnv``, jaxdqn's
``num_workers=0`` ``SyncVectorEnv``), one gradient step of a 32-transition batch after every 4
steps of each env (sb3's ``train_freq=4, gradient_steps=1``; jaxdqn's SimpleQ with
``rollout_fragment_length=4``), an MLP of 64 x 64 ReLU units, Adam, uniform replay of 50,000,
learning from step 1,000, the target network copied every 500 steps, epsilon from 1 to 0.02 over
the first 10,000 steps (RLlib's default schedule). Each contender runs in a process of its own,
first ``--warmup`` env steps (compiles, the replay warm-up; not timed), then ``--timesteps``
timed steps. Rounds interleave the contenders (``--rounds``); the table shows each one's median
steps/s and jaxdqn's ratio to it, per env.

What an env step costs depends on what the policy does (LunarLander's Box2D world steps every
engine particle the lander has fired), and two learners' policies differ, so every env is
wrapped in a timer: the "outside the env" column is the steps per second of the time spent
outside ``env.step`` / ``env.reset``, the framework's own cost, which is what the ratio compares.

    pip install -e ".[gymnasium,box2d]" stable-baselines3 sbx-rl && python scripts/bench_hostenv.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CONTENDERS = ("jaxdqn", "sb3", "sbx")
ENVS = ("CartPole-v1", "LunarLander-v3")
SHARED = dict(buffer_size=50_000, learning_starts=1_000, batch_size=32, train_freq=4, target_update=500,
              hiddens=[64, 64], lr=1e-3, epsilon_timesteps=10_000, final_epsilon=0.02)
IN_ENV = [0.0]  # seconds this process spent in env.step / env.reset


def timed(env_id: str):
    """A Gymnasium env whose step and reset add their time to ``IN_ENV``."""
    import gymnasium

    class Timed(gymnasium.Wrapper):
        def step(self, action):
            begun = time.perf_counter()
            try:
                return self.env.step(action)
            finally:
                IN_ENV[0] += time.perf_counter() - begun

        def reset(self, **kwargs):
            begun = time.perf_counter()
            try:
                return self.env.reset(**kwargs)
            finally:
                IN_ENV[0] += time.perf_counter() - begun

    return Timed(gymnasium.make(env_id))


def run_jaxdqn(env: str, envs: int, warmup: int, timesteps: int) -> tuple[float, float]:
    from jaxdqn import SimpleQConfig, Trainer, register_env

    register_env("timed", lambda env_config: timed(env))
    config = SimpleQConfig(
        env="timed", num_envs_per_worker=envs, num_workers=0, rollout_fragment_length=SHARED["train_freq"],
        train_batch_size=SHARED["batch_size"], buffer_size=SHARED["buffer_size"],
        learning_starts=SHARED["learning_starts"], target_network_update_freq=SHARED["target_update"],
        lr=SHARED["lr"], model={"fcnet_hiddens": SHARED["hiddens"]}, timesteps_per_iteration=500,
        exploration_config={"type": "EpsilonGreedy", "initial_epsilon": 1.0,
                            "final_epsilon": SHARED["final_epsilon"],
                            "epsilon_timesteps": SHARED["epsilon_timesteps"]},
        total_timesteps=10 ** 9)
    trainer = Trainer(config)
    done = 0
    while done < warmup:
        done = trainer.train()["timesteps_total"]
    start, begun, in_env = done, time.perf_counter(), IN_ENV[0]
    while done < start + timesteps:
        done = trainer.train()["timesteps_total"]
    elapsed = time.perf_counter() - begun
    return (done - start) / elapsed, (done - start) / (elapsed - (IN_ENV[0] - in_env))


def run_sb3(module: str, env: str, envs: int, warmup: int, timesteps: int) -> tuple[float, float]:
    """One ``learn`` call over warm-up and timed steps (sb3's epsilon schedule is a fraction of
    it), the clock started by a callback at the warm-up's end."""
    import importlib

    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    marks: dict[str, float] = {}

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            if "begun" not in marks and self.num_timesteps >= warmup:
                marks.update(begun=time.perf_counter(), in_env=IN_ENV[0], steps=self.num_timesteps)
            return True

    dqn = importlib.import_module(module).DQN
    total = warmup + timesteps
    model = dqn("MlpPolicy", make_vec_env(lambda: timed(env), n_envs=envs, seed=0), learning_rate=SHARED["lr"],
                buffer_size=SHARED["buffer_size"], learning_starts=SHARED["learning_starts"],
                batch_size=SHARED["batch_size"], train_freq=SHARED["train_freq"], gradient_steps=1,
                target_update_interval=SHARED["target_update"], policy_kwargs={"net_arch": SHARED["hiddens"]},
                exploration_fraction=SHARED["epsilon_timesteps"] / total, exploration_initial_eps=1.0,
                exploration_final_eps=SHARED["final_epsilon"], seed=0, verbose=0)
    model.learn(total, callback=Clock())
    elapsed, steps = time.perf_counter() - marks["begun"], model.num_timesteps - marks["steps"]
    return steps / elapsed, steps / (elapsed - (IN_ENV[0] - marks["in_env"]))


def measure(contender: str, env: str, envs: int, warmup: int, timesteps: int) -> tuple[float, float]:
    """Steps/s of one contender, in all and outside the env, in a fresh process (``--one``)."""
    out = subprocess.run([sys.executable, __file__, "--one", contender, "--env-id", env, "--envs", str(envs),
                          "--warmup", str(warmup), "--timesteps", str(timesteps)],
                         capture_output=True, text=True, check=True).stdout
    line = json.loads(out.strip().splitlines()[-1])
    return line["steps_per_s"], line["outside_env"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs-list", nargs="+", default=list(ENVS), help="Gymnasium ids")
    parser.add_argument("--envs", type=int, default=1, help="envs stepped per learner (num_envs_per_worker, n_envs)")
    parser.add_argument("--warmup", type=int, default=3_000)
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--one", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--env-id", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        if args.one == "jaxdqn":
            rate, outside = run_jaxdqn(args.env_id, args.envs, args.warmup, args.timesteps)
        else:
            rate, outside = run_sb3("stable_baselines3" if args.one == "sb3" else "sbx", args.env_id, args.envs,
                                    args.warmup, args.timesteps)
        print(json.dumps({"steps_per_s": rate, "outside_env": outside}))
        return
    print(f"{args.envs} env(s), {args.timesteps} timed steps after {args.warmup}, {args.rounds} interleaved rounds")
    print("| env | contender | steps/s (median) | rounds | jaxdqn / it | outside the env: steps/s | jaxdqn / it |")
    print("|---|---|---|---|---|---|---|")
    for env in args.envs_list:
        rates: dict[str, list[tuple[float, float]]] = {c: [] for c in args.contenders}
        for _ in range(args.rounds):
            for contender in args.contenders:
                rates[contender].append(measure(contender, env, args.envs, args.warmup, args.timesteps))
        medians = {c: (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
                   for c, values in rates.items()}
        ours = medians.get("jaxdqn")
        for contender, (rate, outside) in medians.items():
            ratios = [f"{ours[i] / m:.2f}x" if ours else "-" for i, m in enumerate((rate, outside))]
            spread = ", ".join(f"{v[0]:.0f}" for v in rates[contender])
            print(f"| {env} | {contender} | {rate:.0f} | {spread} | {ratios[0]} | {outside:.0f} | {ratios[1]} |",
                  flush=True)


if __name__ == "__main__":
    main()
