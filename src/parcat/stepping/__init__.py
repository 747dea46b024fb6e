"""Agent-level strategies: where each policy step of an episode runs."""
