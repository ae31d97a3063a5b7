"""Fake LLM endpoints for tests: real HTTP servers on loopback that speak OpenAI's chat
completions or Anthropic's Messages wire protocol well enough for the official clients.

    with FakeLLM("openai", [Scripted(status=429, headers={"Retry-After": "1"}),
                            Scripted("ok")]) as llm:
        provider = OpenAIChat("fake-coder", llm.url, ...)

Each completion request takes the next Scripted reply (the last one repeats), or asks the
callable replies(body) for one; model list and lookup requests take none.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    text: str = ""  # the assistant's reply; with an error status, the error's message
    status: int = 200  # an HTTP error status instead (429, 500, 401...)
    delay_s: float = 0.0  # sleep before answering (slower than a client's time-out)
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"}
    prompt_tokens: int | None = None  # default: the prompt's characters / 4
    completion_tokens: int | None = None  # default: the reply's characters / 4


# The error "type" each protocol names a status with.
_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                 403: "permission_denied", 404: "invalid_request_error",
                 429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
_DEFAULT_MESSAGES = {400: "bad request", 401: "invalid api key", 403: "forbidden",
                     404: "not found", 429: "rate limit exceeded", 500: "internal server error",
                     503: "service unavailable", 529: "overloaded"}


class FakeLLM:
    """A context manager serving one protocol ("openai" or "anthropic") on 127.0.0.1.

    key: the API key it accepts (None: any), as Authorization: Bearer (openai) or x-api-key or
    Bearer (anthropic); a wrong one is a 401 whose message echoes it, as
    a careless server might, so that tests can check it is scrubbed. serve_models=False: no
    /v1/models routes (404), like servers without them."""

    def __init__(self, protocol: str, replies: list[Scripted] | Callable[[dict], Scripted],
                 models: tuple[str, ...] = ("fake-coder",), key: str | None = "sk-test-secret",
                 serve_models: bool = True):
        assert protocol in ("openai", "anthropic"), protocol
        assert callable(replies) or replies, "give at least one Scripted reply"
        self.protocol = protocol
        self.replies = replies
        self.models = tuple(models)
        self.key = key
        self.serve_models = serve_models
        self.requests: list[dict[str, Any]] = []
        self.completions: list[dict[str, Any]] = []
        self.url = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> FakeLLM:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}" + ("/v1" if self.protocol == "openai" else "")
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Wake delayed replies, stop accepting, and drop kept-alive connections, so that no
        # handler thread outlives the test for long.
        self._stop.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- what the handler asks ---------------------------------------------------------------

    def next_reply(self, body: dict[str, Any]) -> Scripted:
        with self._lock:
            self.completions.append(body)
            if callable(self.replies):
                return self.replies(body)
            return self.replies[min(len(self.completions), len(self.replies)) - 1]

    def record(self, request: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(request)

    def key_of(self, headers: dict[str, str]) -> str:
        bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
        # Anthropic's API takes x-api-key, and a Bearer key too (the client sends that since 2.x).
        return bearer if self.protocol == "openai" else headers.get("x-api-key", bearer)

    def sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._lock:
            (self._connections.add if alive else self._connections.discard)(conn)


def _handler_for(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.fake = fake
    return Handler


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 with Content-Length, as real endpoints answer: the clients keep connections alive.
    protocol_version = "HTTP/1.1"
    fake: FakeLLM

    def setup(self) -> None:
        super().setup()
        self.fake.track(self.connection, True)

    def finish(self) -> None:
        self.fake.track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        try:
            status, payload, headers = self._answer(method)
            self._send(status, payload, headers)
        except (BrokenPipeError, ConnectionResetError, OSError):
            # The client gave up (a time-out) or the server is shutting down.
            self.close_connection = True

    def _answer(self, method: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        fake = self.fake
        path = self.path.split("?", 1)[0].rstrip("/")
        headers = {k.lower(): v for k, v in self.headers.items()}
        body = self._body()
        fake.record({"method": method, "path": path, "headers": headers, "body": body})
        given = fake.key_of(headers)
        if fake.key is not None and given != fake.key:
            return _error(fake.protocol, 401, f"Incorrect API key provided: {given}")
        completion_path = "/v1/chat/completions" if fake.protocol == "openai" else "/v1/messages"
        if method == "POST" and path == completion_path:
            return self._complete(body or {})
        if method == "GET" and fake.serve_models and path == "/v1/models":
            return 200, _model_list(fake.protocol, fake.models), {}
        if method == "GET" and fake.serve_models and path.startswith("/v1/models/"):
            model = path.removeprefix("/v1/models/")
            if model not in fake.models:
                return _error(fake.protocol, 404, _unknown_model(fake.protocol, model))
            return 200, _model_record(fake.protocol, model), {}
        return _error(fake.protocol, 404, f"no route {method} {path}")

    def _complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        fake = self.fake
        model = str(body.get("model", ""))
        if model not in fake.models:
            return _error(fake.protocol, 404, _unknown_model(fake.protocol, model))
        reply = fake.next_reply(body)
        if reply.delay_s:
            fake.sleep(reply.delay_s)
        if reply.status != 200:
            message = reply.text or _DEFAULT_MESSAGES.get(reply.status, "error")
            return _error(fake.protocol, reply.status, message, reply.headers)
        return 200, _completion(fake.protocol, model, body, reply), reply.headers

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


# -- the wire formats --------------------------------------------------------------------------


def _error(protocol: str, status: int, message: str,
           headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    if protocol == "openai":
        code = {401: "invalid_api_key", 404: "model_not_found"}.get(status)
        payload = {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "error"),
                             "param": None, "code": code}}
    else:
        payload = {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"),
                                              "message": message}}
    return status, payload, headers or {}


def _unknown_model(protocol: str, model: str) -> str:
    if protocol == "openai":
        return f"The model `{model}` does not exist or you do not have access to it."
    return f"model: {model}"


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _prompt_text(protocol: str, body: dict[str, Any]) -> str:
    system = body.get("system", "") if protocol == "anthropic" else ""
    contents = [m.get("content", "") for m in body.get("messages", [])]
    return str(system) + "".join(c if isinstance(c, str) else json.dumps(c) for c in contents)


def _completion(protocol: str, model: str, body: dict[str, Any], reply: Scripted) -> dict[str, Any]:
    prompt_tokens = reply.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = _tokens(_prompt_text(protocol, body))
    completion_tokens = reply.completion_tokens
    if completion_tokens is None:
        completion_tokens = _tokens(reply.text)
    created = int(time.time())
    if protocol == "openai":
        return {"id": f"chatcmpl-fake{created}", "object": "chat.completion", "created": created,
                "model": model, "system_fingerprint": "fake",
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": reply.text}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}
    return {"id": f"msg_fake{created}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": reply.text}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}}


def _model_record(protocol: str, model: str) -> dict[str, Any]:
    if protocol == "openai":
        return {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "kernforge"}
    return {"type": "model", "id": model, "display_name": model,
            "created_at": "2025-01-01T00:00:00Z"}


def _model_list(protocol: str, models: tuple[str, ...]) -> dict[str, Any]:
    data = [_model_record(protocol, m) for m in models]
    if protocol == "openai":
        return {"object": "list", "data": data}
    return {"data": data, "has_more": False, "first_id": models[0] if models else None,
            "last_id": models[-1] if models else None}
