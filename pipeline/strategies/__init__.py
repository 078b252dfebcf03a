"""How a task is solved: the pipeline (the product) and the baselines it is compared with, as plug-ins."""
