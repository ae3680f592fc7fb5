"""What a PyFlink test gets where PyFlink would hand it a Java object.

``env._j_stream_execution_environment`` is a :class:`JavaEnvHandle`: the one thing PyFlink's tests
do with it that has a Millstream meaning is ``get_j_env_configuration(handle).setString(k, v)``
(environment options); anything else on it is a Java call and raises JavaObjectNeeded.
"""
from __future__ import annotations

from typing import Any

from tests.pyflink_compat.classify import JavaObjectNeeded


class JavaEnvHandle:
    def __init__(self, env: Any) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise JavaObjectNeeded(f"calls the Java StreamExecutionEnvironment ({name})")


class JavaConfigurationView:
    """Java ``Configuration``'s setters over the environment's Millstream Configuration."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration

    def setString(self, key: str, value: str) -> None:  # noqa: N802 (Java's name)
        self._configuration.set_string(key, value)

    def getString(self, key: str, default: str | None = None) -> str | None:  # noqa: N802
        return self._configuration.get_string(key, default)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise JavaObjectNeeded(f"calls the Java Configuration ({name})")
