"""An attacker's listener on 127.0.0.1: records every request it receives (method, path, headers, body) and
answers like an OpenAI-compatible endpoint, so a client that reaches it believes it worked. Used to show that a
key or a prompt never arrives where it must not (issue 25.3).

    with Listener() as evil:
        ...  # point something at evil.base_url
        assert evil.keys() == []  # no Authorization header ever arrived
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class Listener:
    def __init__(self, *, redirect_to: str | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        self.redirect_to = redirect_to  # answer every request with 307 to this URL instead
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                owner.received.append({"method": self.command, "path": self.path, "body": body,
                                       "headers": {k.lower(): v for k, v in self.headers.items()}})
                if owner.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", owner.redirect_to + self.path.split("/v1", 1)[-1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.endswith("/chat/completions"):
                    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "OK"}}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
                    data, status = json.dumps(reply).encode(), 200
                else:
                    data, status = b'{"error": {"message": "not found"}}', 404
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _record  # noqa: N815 - http.server's names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def keys(self) -> list[str]:
        """Every Authorization header that arrived."""
        return [r["headers"]["authorization"] for r in self.received if "authorization" in r["headers"]]

    def __enter__(self) -> Self:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
