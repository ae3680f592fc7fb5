"""Several hosts on one machine for tests: each a network namespace with its own address, joined
by a bridge, as machines on a LAN. Nothing a test runs in a host can reach another host through
loopback, so an address that silently means "this machine" breaks there.

    net = Network("ms7")                          # a switch on a free 10.77.N.0/24; this process is 10.77.N.1
    jm = net.add_host("jm")                       # namespace ms7-jm, address 10.77.N.2
    proc = jm.spawn(["python", "-m", ...], log)   # a process living in that host
    jm.link(up=False)                             # pull the host's cable (and put it back)
    net.close()                                   # namespaces, links and bridge removed

Needs root and iproute2 (`ip netns`); :func:`unavailable` says why not where they are missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Optional, Sequence

def _free_subnet() -> str:
    """A 10.77.N /24 no interface of this machine is on: two networks (two pytest workers' modules)
    on one subnet would give this machine the same gateway address twice and cross their routes.
    Starts at one picked by the process id, so concurrent processes rarely even try the same one."""
    used = _ip("-4", "-o", "addr", "show").stdout
    start = os.getpid() % 250
    for i in range(250):
        subnet = f"10.77.{(start + i) % 250 + 1}"
        if f" {subnet}." not in used:
            return subnet
    raise RuntimeError("every 10.77.N.0/24 subnet is in use on this machine")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def unavailable() -> Optional[str]:
    """None when this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2)"
    probe = f"msprobe{uuid.uuid4().hex[:6]}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    _ip("netns", "delete", probe, check=False)
    return None


class Host:
    def __init__(self, network: "Network", name: str, address: str) -> None:
        self.network, self.name, self.address = network, name, address
        self.namespace = f"{network.prefix}-{name}"
        self._next_port = 20000

    def free_port(self) -> int:
        """A port nothing uses in this host (a namespace of its own: all are free)."""
        self._next_port += 1
        return self._next_port

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _ip("netns", "exec", self.namespace, *args)

    def spawn(self, args: Sequence[str], log_path: Path, env: Optional[dict[str, str]] = None) -> "subprocess.Popen[bytes]":
        """A process in this host (its own session, output appended to ``log_path``)."""
        return subprocess.Popen(["ip", "netns", "exec", self.namespace, *args], stdout=open(log_path, "ab"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def link(self, up: bool) -> None:
        """Plug or pull the host's only network link (its loopback stays)."""
        self.run("ip", "link", "set", "eth0", "up" if up else "down")


class Network:
    """The hosts hang off a bridge inside a namespace of its own (a switch), so the machine's own
    firewall (Docker's FORWARD policy DROP, say) never sees their traffic; this process reaches
    them through one more link into the switch, at :attr:`gateway`."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix  # short: interface names have at most 15 characters
        self.switch = f"{prefix}-sw"
        self.hosts: list[Host] = []
        self.subnet = _free_subnet()
        _ip("netns", "add", self.switch)
        try:
            self._in_switch("ip", "link", "add", "br0", "type", "bridge")
            self._in_switch("ip", "link", "set", "br0", "up")
            uplink = f"{prefix}up"
            _ip("link", "add", uplink, "type", "veth", "peer", "name", "uplink", "netns", self.switch)
            _ip("addr", "add", f"{self.gateway}/24", "dev", uplink)
            _ip("link", "set", uplink, "up")
            self._plug("uplink")
        except BaseException:
            self.close()
            raise

    @property
    def gateway(self) -> str:
        """This (the test's) process's address on the network."""
        return f"{self.subnet}.1"

    def _in_switch(self, *args: str) -> None:
        _ip("netns", "exec", self.switch, *args)

    def _plug(self, port: str) -> None:
        self._in_switch("ip", "link", "set", "dev", port, "master", "br0")
        self._in_switch("ip", "link", "set", "dev", port, "up")

    def add_host(self, name: str) -> Host:
        host = Host(self, name, f"{self.subnet}.{len(self.hosts) + 2}")
        _ip("netns", "add", host.namespace)
        self.hosts.append(host)
        port = f"{self.prefix}p{len(self.hosts)}"
        _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", port, "netns", self.switch)
        self._plug(port)
        host.run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        host.run("ip", "link", "set", "eth0", "up")
        host.run("ip", "link", "set", "lo", "up")
        return host

    def close(self) -> None:
        """Deleting a namespace deletes its ends of the links, and with them the other ends."""
        for host in self.hosts:
            _ip("netns", "delete", host.namespace, check=False)
        _ip("netns", "delete", self.switch, check=False)
        _ip("link", "delete", f"{self.prefix}up", check=False)
        self.hosts.clear()
