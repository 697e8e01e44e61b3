"""An upstream that dies the way a killed replica looks from a connection pool: it answers one completion on a
kept-alive connection, then stops listening (new connections are refused) and drops the kept-alive connection at
the next request without a reply. Plain sockets in a thread, so the timing is the test's, not a scheduler's."""

from __future__ import annotations

import json
import socket
import threading

_BODY = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


class SocketUpstream:
    """A plain-socket HTTP/1.1 upstream: each connection's requests in turn; GETs (/health, /metrics) answer 200 `{}`,
    every other request goes to `_complete(conn, served_on_connection)`, which answers it (True: keep the connection)
    or resets it (False)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._listener.close()

    def _complete(self, conn: socket.socket, served_on_connection: int) -> bool:
        raise NotImplementedError

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed: the replica is gone
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            buffer, served = b"", 0
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                if head.startswith(b"GET"):  # /health, /metrics: healthy, no load
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    continue
                if not self._complete(conn, served):
                    # closes with a reset: what a killed process's socket sends
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    return
                served += 1


def send_json(conn: socket.socket, body: bytes) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


class DyingUpstream(SocketUpstream):
    def __init__(self) -> None:
        super().__init__()
        self.completions = 0

    def _complete(self, conn: socket.socket, served_on_connection: int) -> bool:
        if self.completions:  # the second completion: the replica died in between
            return False
        self.completions += 1
        send_json(conn, _BODY)
        self._listener.close()  # no new connections from now on
        return True
