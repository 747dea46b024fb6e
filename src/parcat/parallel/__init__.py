"""Parallelism: the planner, episode executors and agent-level policy steppers."""
