"""One episode: the one place it is stepped (rollout), its result, the environment probe and
the recordings of episodes (replays)."""
