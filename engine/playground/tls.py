"""A TLS front for the embedded broker: clients speak TLS to it, it speaks plain TCP on.

The Tansu broker (v0.6.0) cannot serve TLS from its command line: ``--cert`` and
``--key`` are declared in one clap argument group that allows only one of them
(``error: the argument '--cert <CERT>' cannot be used with '--key <KEY>'``), while the
broker only enables TLS when it is given both. So :class:`EmbeddedBroker` puts this
terminator in front of it when asked for TLS: Kafka clients make a real TLS handshake
(OpenSSL on both sides, the certificate and key a test made) with the port the broker
advertises, and the decrypted Kafka protocol goes on to the broker over loopback.

It runs an asyncio loop in a daemon thread; every connection is two pumps.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path

__all__ = ["TlsTerminator"]


class TlsTerminator:
    """Accepts TLS on a free loopback port and forwards the plaintext to ``target``."""

    def __init__(self, certfile: str | Path, keyfile: str | Path) -> None:
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(str(certfile), str(keyfile))
        self.port: int | None = None
        #: The plaintext port connections are forwarded to (set before clients connect).
        self.target: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    def start(self) -> int:
        """Listen (on a port the OS picks) and return the port."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            # A client that rejects our certificate ends its handshake: not our error.
            loop.set_exception_handler(lambda _loop, _context: None)
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context)
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            self._server.close()
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="tls-terminator", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        assert self.port is not None
        return self.port

    def stop(self) -> None:
        """Stop listening and cut every connection."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target or 0)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()
