"""Internals shared by every Millstream process: key groups, configuration, operators, serialization."""
