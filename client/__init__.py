"""Client side: StreamGraph and JobGraph generation, submission, the ``millstream`` CLI."""
