"""Closing a connection without losing its answer: uvicorn's HTTP/1.1 protocol with a
lingering close, as ``serve`` and ``proxy`` run it.

uvicorn closes a connection as soon as it has answered a request that ends it: its own 400
for a request it cannot parse, an answer with ``Connection: close`` (the body limit's 413),
any answer to a request sent with ``Connection: close``. When the request's body is not
read by then (a refusal does not read it) and is still arriving, the kernel answers with a
reset instead of a close (RFC 2525, 2.17), and the client, still sending its body or reading
an answer delimited by the close, gets ``ECONNRESET`` instead of the 400, 401 or 413: an
OpenAI client reports a connection error.

:class:`LingeringH11Protocol` closes such a connection the way web servers do (nginx's
lingering close): the answer is sent, then the end of its side (``shutdown(SHUT_WR)``), then
what the client still sends is read and dropped until the client closes too, is silent for
:data:`LINGER_IDLE_S`, or :data:`LINGER_S` have passed. A connection whose request was read
whole closes at once, as before. Always h11 (uvicorn's default), even where httptools is
installed: one protocol, the one tested.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: The longest a connection lingers after its answer, however much the client still sends.
LINGER_S = 30.0
#: A lingering connection closes once the client sent nothing for this long.
LINGER_IDLE_S = 5.0
#: The client's states in which part of its request may still be unread or on its way.
_UNREAD = (h11.SEND_BODY, h11.ERROR)


class _Transport:
    """The connection's transport as uvicorn's protocol holds it: closing it may linger."""

    def __init__(self, transport: asyncio.Transport, protocol: LingeringH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()

    def close(self) -> None:
        self._protocol.close_connection()


class LingeringH11Protocol(H11Protocol):
    """uvicorn's h11 protocol whose closes linger while the request may be unread."""

    #: The bounds of a linger (:data:`LINGER_S`, :data:`LINGER_IDLE_S`); a subclass sets
    #: shorter ones where waiting them out would be slow (the tests).
    linger_s = LINGER_S
    linger_idle_s = LINGER_IDLE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering = False
        self._socket: asyncio.Transport | None = None
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._socket = transport
        super().connection_made(cast(asyncio.Transport, _Transport(transport, self)))

    def close_connection(self) -> None:
        """Close at once when the request was read whole, else linger (the module's doc)."""
        transport = self._socket
        if transport is None or self.lingering or transport.is_closing():
            return
        if self.conn.their_state not in _UNREAD or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        transport.write_eof()  # after what is buffered: the answer goes out whole
        transport.resume_reading()  # uvicorn pauses reading when the body is not read
        self._deadline = self.loop.time() + self.linger_s
        self._wait()

    def _wait(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        left = min(self.linger_idle_s, self._deadline - self.loop.time())
        self._timer = self.loop.call_later(max(left, 0.0), self._end)

    def _end(self) -> None:
        self._timer = None
        if self._socket is not None:
            self._socket.close()

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # the rest of a request that was answered: dropped
            self._wait()
            return
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """The server stops: a lingering connection closes now, not after its client."""
        if self.lingering:
            self._end()
            return
        super().shutdown()
