"""Stand-in for ``pyflink.java_gateway``: Millstream has no JVM, so the gateway is a Java object
a test cannot have."""
from tests.pyflink_compat.classify import JavaObjectNeeded


def get_gateway():
    raise JavaObjectNeeded("calls get_gateway(), PyFlink's JVM gateway")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def java_only(*args, **kwargs):
        raise JavaObjectNeeded(f"calls pyflink.java_gateway.{name}")

    return java_only
