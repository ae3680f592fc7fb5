"""Stand-in for the package ``pyflink.testing`` (its modules are stand-ins too)."""
