"""The team strategy: a lead agent that delegates subtasks to worker agents sharing its workspace."""
