"""RLlib's result dict of an iteration (shell layer): the plan's on-device report as host
scalars, under RLlib's names and layout (``info/learner/<policy>/learner_stats``,
``policy_reward_*``, throughputs, times)."""

from __future__ import annotations

import datetime
import time
from typing import Any, Mapping

import numpy as np

LEARNER_STATS = ("loss", "mean_q", "min_q", "max_q", "mean_td_error", "cur_lr", "grad_gnorm")


def _scalar(x: Any) -> Any:
    value = np.asarray(x).item()
    return float(value) if isinstance(value, float) else value


THIS_ITER = ("episodes_this_iter", "timesteps_this_iter", "num_steps_trained_this_iter")


def merge_reports(reports: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One iteration's report from the reports of its chunks (several with ``min_iter_time_s``):
    the ``*_this_iter`` counts summed, everything else the last chunk's."""
    out = dict(reports[-1])
    for key in THIS_ITER:
        out[key] = sum(np.asarray(r[key]) for r in reports)
    return out


DIVERGENCE_STATS = ("loss", "grad_gnorm")  # mean_q of sequences is NaN when a batch trains no step


def divergence(report: Mapping[str, Any]) -> str | None:
    """What in an iteration's report (host arrays, ``[R]`` with vmapped runs) is non-finite: the
    first learner statistic (loss, gradient norm) or the online parameters, naming the run;
    None when all is finite."""
    checks = [(k, v) for k, v in report.items()
              if k.startswith("learner/") and k.rsplit("/", 1)[1] in DIVERGENCE_STATS]
    for key, value in checks:
        bad = ~np.isfinite(np.asarray(value))
        if bad.any():
            run = f" (run {int(np.argmax(bad.reshape(-1)))})" if bad.ndim else ""
            _, pid, stat = key.split("/")
            return f"policy {pid}'s {stat} is {np.asarray(value).reshape(-1)[np.argmax(bad.reshape(-1))]}{run}"
    finite = np.asarray(report.get("params_finite", True))
    if not finite.all():
        run = f" (run {int(np.argmin(finite.reshape(-1)))})" if finite.ndim else ""
        return f"the online parameters hold non-finite values{run}"
    return None


def window_list(values: Any, *, integer: bool = False) -> list[Any]:
    """A ``hist/*`` report array as RLlib's ``hist_stats`` list: its finite entries, in order."""
    values = np.asarray(values).reshape(-1)
    values = values[np.isfinite(values)]
    return [int(v) for v in values] if integer else [float(v) for v in values]


def result_dict(report: Mapping[str, Any], *, iteration: int, time_this_iter_s: float,
                time_total_s: float) -> dict[str, Any]:
    """RLlib's result layout from one seed's iteration report (host scalars; the window's
    episodes as ``hist_stats`` lists)."""
    hist = {k.split("/", 1)[1]: window_list(v, integer=k.endswith("lengths"))
            for k, v in report.items() if k.startswith("hist/")}
    r = {k: _scalar(v) for k, v in report.items() if k != "params_finite" and not k.startswith("hist/")}
    trained_this_iter = r.pop("num_steps_trained_this_iter")
    timesteps_this_iter = r.pop("timesteps_this_iter")
    seconds = max(time_this_iter_s, 1e-9)
    # The plan reports learner/<pid>/<stat> per trained policy and, for a multi-agent env,
    # policy_reward_<stat>/<pid> (RLlib's policy_reward_* are {} for a single agent).
    pids = sorted({k.split("/")[1] for k in r if k.startswith("learner/")})
    learners = {pid: {"learner_stats": {k: r[f"learner/{pid}/{k}"] for k in LEARNER_STATS}} for pid in pids}
    per_policy = {f"policy_reward_{stat}": {k.split("/", 1)[1]: v for k, v in r.items()
                                            if k.startswith(f"policy_reward_{stat}/")}
                  for stat in ("mean", "min", "max")}
    return {
        "episode_reward_mean": r["episode_reward_mean"],
        "episode_reward_min": r["episode_reward_min"],
        "episode_reward_max": r["episode_reward_max"],
        "episode_len_mean": r["episode_len_mean"],
        "episodes_this_iter": r["episodes_this_iter"],
        "episodes_total": r["episodes_total"],
        "timesteps_total": r["timesteps_total"],
        "timesteps_this_iter": timesteps_this_iter,
        "training_iteration": iteration,
        "time_this_iter_s": time_this_iter_s,
        "time_total_s": time_total_s,
        "num_env_steps_sampled_throughput_per_sec": timesteps_this_iter / seconds,
        "num_env_steps_trained_throughput_per_sec": trained_this_iter / seconds,
        "info": {
            "num_steps_sampled": r["num_steps_sampled"],
            "num_steps_trained": r["num_steps_trained"],
            "num_target_updates": r["num_target_updates"],
            "last_target_update_ts": r["last_target_update_ts"],
            "learner": learners,
        },
        **per_policy,
        "hist_stats": hist,
        "custom_metrics": {},  # RLlib's, filled by callbacks; jaxdqn has none
        "done": False,
        "timestamp": int(time.time()),
        "date": datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"),
    }
