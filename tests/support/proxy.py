"""A loopback TCP proxy a test can cut: a network partition between one host and the database.

``TcpProxy(port).start()`` listens on a free 127.0.0.1 port and forwards every connection to ``port``. ``freeze()``
stops forwarding in both directions (bytes wait, nothing errors: what a dropped route looks like to the client),
``drop()`` closes every connection and refuses new ones. Threads only, no third-party code.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._dropped = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def freeze(self) -> None:
        self._open.clear()

    def drop(self) -> None:
        self._dropped = True
        self._open.set()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._dropped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self._open.wait()
                if self._dropped:
                    return
                sink.sendall(data)
