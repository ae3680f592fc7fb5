"""Stand-in for ``pyflink.util.java_utils``.

``get_j_env_configuration(env._j_stream_execution_environment)`` is how PyFlink's tests set
environment options (``config.setString("python.execution-mode", "thread")``): the stand-in hands
back the environment's own Configuration behind Java's setter names. Every other helper of the
module works on Java objects and raises JavaObjectNeeded.
"""
from tests.pyflink_compat.java_handles import JavaEnvHandle, JavaConfigurationView
from tests.pyflink_compat.classify import JavaObjectNeeded


def get_j_env_configuration(j_env):
    if isinstance(j_env, JavaEnvHandle):
        return JavaConfigurationView(j_env.env.get_configuration())
    raise JavaObjectNeeded(f"calls get_j_env_configuration on {type(j_env).__name__}")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def java_only(*args, **kwargs):
        raise JavaObjectNeeded(f"calls pyflink.util.java_utils.{name}")

    return java_only
