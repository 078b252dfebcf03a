"""One ReAct loop (reply, one bash command, observation) shared by juniors, solo agents and teams."""
