"""A TCP gate in front of the embedded broker: a broker outage that a test can switch.

The embedded Tansu broker keeps its log in memory, so stopping its process loses every
topic. A test of a broker outage instead closes the gate: the port clients know stops
accepting connections and every open connection is cut, as when the broker's machine
goes away; opening the gate again on the same port brings "the broker" back with its
log intact. Clients must reach the broker only through the gate, so the broker
advertises the gate's port (``EmbeddedBroker(advertised_port=gate.port)``).

Example::

    gate = TcpGate()
    with EmbeddedBroker(advertised_port=gate.port) as broker:
        gate.open(broker.port)
        ...               # clients use gate.bootstrap_servers
        gate.close()      # the broker is unreachable
        gate.open()       # and back
"""

from __future__ import annotations

import contextlib
import socket
import threading

from engine.playground.children import free_port

__all__ = ["TcpGate"]


class TcpGate:
    """Forwards connections from a fixed loopback port to a target port while open."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._target: int | None = None
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_open(self) -> bool:
        return self._listener is not None

    def open(self, target_port: int | None = None) -> None:
        """Accept connections on :attr:`port` and forward them to ``target_port``
        (default: the previous target)."""
        if target_port is not None:
            self._target = target_port
        if self._target is None:
            raise ValueError("the gate has no target port")
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        """Refuse new connections and cut every open one."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def __enter__(self) -> TcpGate:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target or 0), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # closed meanwhile
                    client.close()
                    upstream.close()
                    return
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            src.close()
