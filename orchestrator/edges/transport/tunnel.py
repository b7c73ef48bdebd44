"""A local port that leads, through an existing SSH connection, to a port as seen from the host.

For health URLs behind a firewall (or bound to the host's loopback only): orch polls
http://127.0.0.1:<local>/health and every TCP connection to that local port becomes an SSH
"direct-tcpip" channel to (remote_host, remote_port) on the far side. It rides on the sweep's one
persistent connection, so it costs no new SSH handshake.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Callable

import paramiko

from orchestrator.errors import TransportError

OpenChannel = Callable[[tuple[str, int]], paramiko.Channel]
CHUNK = 65536


class Tunnel:
    def __init__(self, label: str, open_channel: OpenChannel, remote: tuple[str, int]) -> None:
        self.label, self.open_channel, self.remote = label, open_channel, remote
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))  # loopback only: the tunnel is the controller's
        self._listener.listen(16)
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept_loop, name=f"tunnel-{self.local_port}", daemon=True)
        accept.start()
        self._threads.append(accept)

    def url_for(self, url: str) -> str:
        """The same URL with its host:port replaced by the tunnel's local end."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.local_port}"))

    def close(self) -> None:
        self._closed.set()
        try:
            self._listener.close()
        except OSError:
            pass
        for t in self._threads:
            t.join(timeout=2)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.2)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return
            pump = threading.Thread(target=self._serve, args=(client,), daemon=True)
            pump.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [pump]

    def _serve(self, client: socket.socket) -> None:
        """Copy bytes both ways until either side closes. A failed channel open (the remote
        port is closed: the server is still starting) just closes the client, which the health
        poller reads as 'not ready yet', exactly like a refused connection."""
        try:
            chan = self.open_channel(self.remote)
        except (TransportError, paramiko.SSHException, OSError):
            client.close()
            return
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, chan], [], [], 0.2)
                if client in ready:
                    data = client.recv(CHUNK)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in ready:
                    data = chan.recv(CHUNK)
                    if not data:
                        break
                    client.sendall(data)
        except (OSError, paramiko.SSHException):
            pass
        finally:
            chan.close()
            client.close()
