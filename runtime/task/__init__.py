"""One task: its operator chain, wired by direct calls, and what it knows of its environment."""
