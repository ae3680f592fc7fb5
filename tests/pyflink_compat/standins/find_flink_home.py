"""Stand-in for ``pyflink.find_flink_home``: it locates the Flink (Java) distribution and its
jars, which Millstream does not have."""
from tests.pyflink_compat.classify import JavaObjectNeeded


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def java_only(*args, **kwargs):
        raise JavaObjectNeeded(f"calls pyflink.find_flink_home.{name} (the Flink Java distribution)")

    return java_only
