"""Looking at trained models: attention pictures and the explorer page, head importance and
pruning studies, and the yardsticks (baselines)."""
