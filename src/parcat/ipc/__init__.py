"""Processes and shared memory: what eval, train and sim build their workers on (knowing
nothing of missions, episodes, training or simulation)."""
