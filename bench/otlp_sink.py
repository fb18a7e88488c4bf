"""A local OTLP/HTTP receiver for bench/otel_cost.sh: takes POST /v1/traces, answers 200 at
once, and counts requests, bytes and spans (each span has one "spanId"). It
stands for a collector on the same host; on SIGTERM it prints its counts as one JSON line.

Usage: python3 bench/otlp_sink.py PORT_FILE   (writes the port it listens on into PORT_FILE)
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

counts = {"requests": 0, "bytes": 0, "spans": 0}
lock = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector does

    def setup(self) -> None:
        super().setup()
        # The response's header and body go in two writes: without this, Nagle holds the body
        # until the client's delayed ACK of the header, 40 ms per export.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # Counted, not decoded: a collector parses in compiled code, and a Python parser beside
        # the worker on this machine's two cores would measure itself (tests/otel decodes).
        spans = body.count(b'"spanId"')
        with lock:
            counts["requests"] += 1
            counts["bytes"] += len(body)
            counts["spans"] += spans
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))

    def stop(*_: Any) -> None:
        with lock:
            print(json.dumps(counts), flush=True)
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
