"""Writes tests/data/verl_rollouts/{1,2}.jsonl with verl 0.9.1's own writer, RayPPOTrainer._write_generations
(what trainer.rollout_data_dir dumps each step). Run it where verl 0.9.1 is installed:

    python tests/data/make_verl_rollouts.py

Three prompts, four samples each, as verl's batch holds them (each prompt repeated, interleaved); the reward
function's extra field "acc"; step 2 has a prompt no sample solves.
"""
from pathlib import Path

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

HERE = Path(__file__).resolve().parent / "verl_rollouts"
PROMPTS = ["What is 2+2?", "Name a prime above 10.", "Spell 'cat' backwards."]
ANSWERS = ["4", "11", "tac"]
SCORES = {1: [[1, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]], 2: [[1, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]}

for step, scores in SCORES.items():
    inputs = [p for p in PROMPTS for _ in range(4)]
    outputs = [f"answer {i} to {p}" for p in PROMPTS for i in range(4)]
    gts = [a for a in ANSWERS for _ in range(4)]
    flat = [float(s) for row in scores for s in row]
    RayPPOTrainer._write_generations(inputs, outputs, gts, flat, {"acc": [bool(s) for s in flat]}, str(HERE), step)
