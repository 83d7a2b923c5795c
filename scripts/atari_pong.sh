#!/usr/bin/env bash
# RLlib's pong-dqn.yaml, unchanged, to 3M env steps (12M frames) with the ALE inside the compiled
# loop (pip install -e ".[cli,atari]"); then the learning curve against the usual bar of 18.
# On 2 CPU cores it passes 18 at 800-850k env steps (two runs), in about an hour when the cores
# are free (docs/learning.md).
#
#   OUT=runs/pong TIMESTEPS=3000000 bash scripts/atari_pong.sh
set -euo pipefail
OUT=${OUT:-runs/pong}
TIMESTEPS=${TIMESTEPS:-3000000}
PLOTS=${PLOTS:-docs/results}
mkdir -p "$PLOTS"
jaxdqn train --config tests/data/rllib/pong-dqn.yaml --timesteps "$TIMESTEPS" --out "$OUT" --quiet \
  --checkpoint-every 20 --keep 1
jaxdqn plot "$OUT" --output "$PLOTS/pong-dqn.png" --reference 18 --reference-label "the usual bar (18)"
tail -1 "$OUT/result.json" | python -c "import json, sys; r = json.loads(sys.stdin.read()); print(r['timesteps_total'], r['episode_reward_mean'])"
