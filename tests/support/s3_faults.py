"""An HTTP proxy in front of moto that makes S3 misbehave on demand: every request answered
``503 SlowDown`` (S3's throttling answer), or held for a while before it is passed on. The
brokers talk to the proxy as their S3 endpoint (real HTTP through ``object_store`` still);
freezing moto itself (SIGSTOP) stays the way to make S3 silent."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class S3FaultProxy:
    """``mode``: "pass" (forward), "unavailable" (503 SlowDown) or "slow" (forward after
    ``delay`` seconds)."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.mode = "pass"
        self.delay = 0.0
        self.requests = 0
        self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the S3 client pools connections

            def log_message(self, format, *args):
                pass  # quiet: the brokers' own logs say what they saw

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.requests += 1
                mode, delay = proxy.mode, proxy.delay
                if mode == "unavailable":
                    proxy.refused += 1
                    self._answer(503, {"Content-Type": "application/xml"}, SLOW_DOWN)
                    return
                if mode == "slow":
                    time.sleep(delay)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    out = {k: v for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP}
                    self._answer(resp.status, out, data)
                except OSError:
                    self._answer(502, {}, b"")
                finally:
                    conn.close()

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that gave up on a held request: nothing to answer any more

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def set(self, mode: str, delay: float = 0.0) -> None:
        assert mode in ("pass", "unavailable", "slow"), mode
        self.mode, self.delay = mode, delay

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
