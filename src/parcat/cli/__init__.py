"""The command-line interface: parses, calls the library, renders. Nothing else."""
