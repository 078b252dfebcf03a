"""Stage 1: K cheap, independent ReAct rollouts per task, and the pool of patches they leave."""
