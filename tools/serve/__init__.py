"""The harness as an HTTP service (`python -m tools.serve`): evaluate answers, one at a time or as polled jobs,
with the reward of tools/reward.py beside each Evaluation, on the same evaluation pool as everything else."""
