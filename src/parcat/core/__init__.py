"""The bottom layer: what every other layer uses and that uses nothing of parcat's.

Errors, limits, seeds, files (atomic writes, YAML and JSON, output checks, run locks),
imports of user code, the machine's resources, traces and joining a Ray cluster."""
