#!/usr/bin/env bash
# MinAtar at the paper's DQN protocol (the shipped tuned examples): every game, SEEDS vmapped
# seeds, FRAMES env steps each, then one learning-curve PNG per game with the MinAtar paper's DQN
# result at 5M frames (Young & Tian 2019, v2, read from its figure) as a dashed line, and a table
# of the final returns (episode_reward_mean over the last 100 training episodes, per seed).
#
#   FRAMES=5000000 SEEDS=5 OUT=runs/minatar bash scripts/minatar_benchmark.sh   # the paper's length (a GPU)
#   FRAMES=1000000 SEEDS=3 GAMES="Breakout" bash scripts/minatar_benchmark.sh   # what a CPU does in an hour
#
# One SGD step per frame: on 2 CPU cores about 1,000 frames/s for all seeds together; on one GPU
# see docs/benchmarks.md. PLOTS (default docs/results) receives <game>-minatar.png.
set -euo pipefail
FRAMES=${FRAMES:-5000000}
SEEDS=${SEEDS:-5}
OUT=${OUT:-runs/minatar}
PLOTS=${PLOTS:-docs/results}
GAMES=${GAMES:-"Breakout Asterix Freeway SpaceInvaders Seaquest"}
declare -A PAPER=([Breakout]=10 [Asterix]=17 [Freeway]=50 [SpaceInvaders]=43 [Seaquest]=20)
mkdir -p "$OUT" "$PLOTS"
for game in $GAMES; do
  lower=$(echo "$game" | tr '[:upper:]' '[:lower:]')
  run="$OUT/$game-MinAtar"
  if [ -d "$run" ] && ls "$run"/checkpoint_* >/dev/null 2>&1; then
    jaxdqn train --resume "$run" --timesteps "$FRAMES" --quiet --checkpoint-every 20 --keep 1
  else
    jaxdqn train --config "$(python -c "import importlib.resources as r; print(r.files('jaxdqn') / 'tuned_examples' / '$lower-minatar-dqn.yaml')")" \
      --timesteps "$FRAMES" --seeds "$SEEDS" --out "$run" --quiet --checkpoint-every 20 --keep 1
  fi
  jaxdqn plot "$run" --output "$PLOTS/$lower-minatar.png" \
    --reference "${PAPER[$game]}" --reference-label "MinAtar paper DQN, 5M frames"
done
python - "$OUT" $GAMES <<'PY'
import json, pathlib, sys
out, games = pathlib.Path(sys.argv[1]), sys.argv[2:]
print("| game | frames | final episode_reward_mean per seed | mean |")
print("|---|---|---|---|")
for game in games:
    finals = []
    for seed in sorted((out / f"{game}-MinAtar").glob("seed_*")):
        last = json.loads((seed / "result.json").read_text().splitlines()[-1])
        finals.append(last["episode_reward_mean"])
    print(f"| {game} | {last['timesteps_total']:,} | {', '.join(f'{r:.1f}' for r in finals)} | "
          f"{sum(finals) / len(finals):.1f} |")
PY
