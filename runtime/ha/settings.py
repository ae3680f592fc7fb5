"""The high-availability options of a configuration, read and checked once."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from millstream.runtime import config as cfg
from millstream.runtime.ha.api import HaError


class HaConfigurationError(HaError, cfg.ConfigurationError):
    """An HA option that cannot be used; the message names the key."""


def join_zk_path(*parts: str) -> str:
    """``"/millstream", "/default", "leader"`` -> ``"/millstream/default/leader"`` (Flink's
    generateZookeeperPath: slashes trimmed, empty parts dropped)."""
    return "/" + "/".join(p.strip("/") for p in parts if p.strip("/"))


def _storage_dir(value: str) -> Path:
    text = value.strip()
    if text.startswith("file:") or "://" in text:
        parsed = urlparse(text)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise HaConfigurationError(
                f"{cfg.HA_STORAGE_DIR.key} {value!r}: only local or shared directories are supported "
                "(an absolute path or file:///path)")
        text = unquote(parsed.path)
    path = os.path.expanduser(text)
    if not os.path.isabs(path):
        raise HaConfigurationError(
            f"{cfg.HA_STORAGE_DIR.key} {value!r} is not absolute: every JobManager must resolve it to the "
            "same shared directory")
    return Path(os.path.normpath(path))


_CLUSTER_ID = re.compile(r"[A-Za-z0-9._\-/]+")


@dataclass(frozen=True)
class HaSettings:
    """``high-availability.*`` of one configuration. ``zookeeper`` is False for NONE."""

    zookeeper: bool
    quorum: str = ""
    root: str = "/millstream"
    cluster_id: str = "/default"
    storage_dir: Optional[Path] = None
    session_timeout_ms: int = 60_000
    connection_timeout_ms: int = 15_000
    retry_wait_ms: int = 5_000
    max_retry_attempts: int = 3
    tolerate_suspended: bool = False

    @property
    def namespace(self) -> str:
        """The cluster's ZooKeeper node: ``<path.root>/<cluster-id>``."""
        return join_zk_path(self.root, self.cluster_id)

    @property
    def cluster_storage_dir(self) -> Path:
        """The cluster's directory in HA storage: ``<storageDir>/<cluster-id>``."""
        if self.storage_dir is None:
            raise HaConfigurationError(f"{cfg.HA_STORAGE_DIR.key} is not set")
        return self.storage_dir.joinpath(*[p for p in self.cluster_id.split("/") if p])

    @classmethod
    def from_configuration(cls, conf: cfg.Configuration) -> HaSettings:
        mode = conf.get(cfg.HA_TYPE)
        cluster_id = conf.get(cfg.HA_CLUSTER_ID)
        if not _CLUSTER_ID.fullmatch(cluster_id) or any(p in (".", "..") for p in cluster_id.split("/")):
            raise HaConfigurationError(f"{cfg.HA_CLUSTER_ID.key} {cluster_id!r}: use letters, digits, '.', '_', '-' "
                                       "and '/' (no '.' or '..' parts)")
        root = conf.get(cfg.HA_ZOOKEEPER_ROOT)
        if not root.startswith("/") or "//" in root or not _CLUSTER_ID.fullmatch(root):
            raise HaConfigurationError(f"{cfg.HA_ZOOKEEPER_ROOT.key} {root!r}: an absolute ZooKeeper path such as "
                                       "/millstream")
        session = conf.get(cfg.HA_ZOOKEEPER_SESSION_TIMEOUT)
        connection = conf.get(cfg.HA_ZOOKEEPER_CONNECTION_TIMEOUT)
        retry_wait = conf.get(cfg.HA_ZOOKEEPER_RETRY_WAIT)
        attempts = conf.get(cfg.HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS)
        if session <= 0 or connection <= 0:
            raise HaConfigurationError(f"{cfg.HA_ZOOKEEPER_SESSION_TIMEOUT.key} and "
                                       f"{cfg.HA_ZOOKEEPER_CONNECTION_TIMEOUT.key} must be positive")
        if attempts < 0:
            raise HaConfigurationError(f"{cfg.HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS.key} must be 0 or more, got {attempts}")
        storage = conf.get(cfg.HA_STORAGE_DIR)
        settings = cls(
            zookeeper=mode == "ZOOKEEPER",
            quorum="".join((conf.get(cfg.HA_ZOOKEEPER_QUORUM) or "").split()),
            root=root, cluster_id=cluster_id,
            storage_dir=_storage_dir(storage) if storage else None,
            session_timeout_ms=session, connection_timeout_ms=connection,
            retry_wait_ms=retry_wait, max_retry_attempts=attempts,
            tolerate_suspended=conf.get(cfg.HA_ZOOKEEPER_TOLERATE_SUSPENDED))
        if settings.zookeeper:
            if not settings.quorum:
                raise HaConfigurationError(f"{cfg.HA_TYPE.key} is ZOOKEEPER but {cfg.HA_ZOOKEEPER_QUORUM.key} is not "
                                           "set: give the ZooKeeper servers as host:port[,host:port...]")
            if settings.storage_dir is None:
                raise HaConfigurationError(f"{cfg.HA_TYPE.key} is ZOOKEEPER but {cfg.HA_STORAGE_DIR.key} is not set: "
                                           "give a directory every JobManager shares")
        return settings
