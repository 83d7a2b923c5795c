"""Seeds (of 10 vmapped) at or above the slow suite's thresholds, per key: the numbers of the
README's learning table and docs/learning.md.

    python scripts/learning_counts.py [KEY ...]     # default: key 1, the slow suite's

Each case is ``tests/test_learning.py``'s: the shipped tuned example through ``make_train``,
``split(key(k), 10)``, ``episode_reward_mean`` after its 100k env steps.
"""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxdqn.plan import make_train  # noqa: E402
from tests.test_learning import CASES, tuned_config  # noqa: E402


def main() -> None:
    keys = [int(k) for k in sys.argv[1:]] or [1]
    for algo, env, threshold in CASES:
        train = jax.jit(jax.vmap(make_train(tuned_config(algo, env))))
        for k in keys:
            start = time.perf_counter()
            _, reports = train(jax.random.split(jax.random.key(k), 10))
            final = np.asarray(reports["episode_reward_mean"])[:, -1]
            print(f"{algo} {env} key({k}): {int(np.sum(final >= threshold))} of 10 >= {threshold}; final "
                  f"{np.round(final, 1).tolist()} ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
