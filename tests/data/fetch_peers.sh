#!/usr/bin/env bash
# The other trainers' released source for the optional differential tests (tests/against_peers):
#   bash tests/data/fetch_peers.sh DIR && RLADV_PEER_SRC=DIR .venv/bin/python -m pytest -m peers tests/against_peers
# trl, openrlhf and skyrl come from the package index (--no-deps: nothing is installed); NeMo-RL's files from its
# public repository at the commit docs/conventions.md names: its advantage estimator, its reward shaping and GRPO
# trainer (the stop-properly penalty and the advantage clip, for test_peers_own_tests.py), its loss package (ClippedPGLossFn,
# for test_peers_token_weight.py) and the global batch's normalisers (models/automodel/data.py process_global_batch).
set -euo pipefail
dir=${1:?usage: fetch_peers.sh DIR}
mkdir -p "$dir" && cd "$dir"
python3 -m pip download --quiet --no-deps -d wheels trl==1.16.0 openrlhf==0.11.2 skyrl==0.3.0
for w in wheels/*.whl; do python3 -m zipfile -e "$w" .; done
[ -d openrlhf ] || cp -r openrlhf-0.11.2.data/purelib/openrlhf .
commit=7ea279abf
for f in nemo_rl/algorithms/utils.py nemo_rl/algorithms/advantage_estimator.py nemo_rl/algorithms/reward_functions.py \
         nemo_rl/algorithms/grpo.py \
         nemo_rl/algorithms/loss/{__init__,interfaces,loss_functions,utils,wrapper}.py \
         nemo_rl/models/automodel/data.py; do
  mkdir -p "$(dirname "$f")"
  curl -fsSL "https://raw.githubusercontent.com/NVIDIA-NeMo/RL/$commit/$f" -o "$f"
done
