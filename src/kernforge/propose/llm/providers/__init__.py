"""providers: one chat interface over the user's LLM, whichever wire protocol it speaks.

A provider's lifecycle, as the LLM proposer drives it:

  make_provider(spec, model)   once per run, from --llm and --llm-model: reads the API key from
                               the environment (a missing one is a UserError naming the variable);
  check()                      once, before the search starts: a bad key, URL or model name is one
                               UserError line that names the fix;
  complete(system, messages)   once per agent turn, from the proposer's threads (a provider holds
                               one thread-safe client): a Completion, or a ProviderError after its
                               retries, which the proposer turns into a NoProposal (a value).

Retries are the official clients' own: exponential back-off from 0.5 s up to 8 s on 408, 409,
429, 5xx, time-outs and dropped connections, honouring Retry-After / retry-after-ms
(tests/test_llm_providers.py measures it against a real server). Adding a provider is one new
file and one line in REGISTRY.

No API key appears in a label, repr, message or exception made here: messages from the server
are scrubbed of it, and the clients' exceptions are not chained.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from kernforge.errors import UserError

SPEC_FORMS = ("openai:MODEL, anthropic:MODEL, or an OpenAI-compatible server's URL "
              "(http://HOST:PORT/v1 with --llm-model NAME)")
# The longest server message an error line carries; an HTML error page is kilobytes.
MESSAGE_CHARS = 200


@dataclass
class Message:
    role: str  # "user" | "assistant"
    content: str


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # wall time of the whole call, retries included
    model: str  # the model the endpoint says answered
    stop_reason: str = ""  # "stop", "length" (openai); "end_turn", "max_tokens" (anthropic)
    retries: int = 0  # retried attempts the client made before this answer


class ProviderError(Exception):
    """A call that failed after its retries: kind is one of auth | not_found | bad_request |
    rate_limit | server | timeout | connection; message is one line; retry_after_s is the
    server's Retry-After when it sent one; status the HTTP status (None without a response);
    reason the server's or the transport's own words, short."""

    def __init__(self, kind: str, message: str, retry_after_s: float | None = None, *,
                 status: int | None = None, reason: str = ""):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after_s = retry_after_s
        self.status = status
        self.reason = reason


class Provider(Protocol):
    name: str  # "openai" | "anthropic"
    model: str
    label: str  # what a user reads: "openai:gpt-4.1", "http://127.0.0.1:8000/v1 qwen2.5-coder"
    endpoint: str  # the base URL it talks to, after OPENAI_BASE_URL / ANTHROPIC_BASE_URL

    def complete(self, system: str, messages: list[Message], max_tokens: int) -> Completion: ...

    def check(self) -> None: ...


def parse_llm_spec(spec: str, model: str | None) -> tuple[str, str, str | None]:
    """(provider name, model, base_url or None) from --llm and --llm-model; --llm-model wins. A
    server's URL without a model gives "": the provider asks the server which it serves."""
    spec = spec.strip()
    if spec.startswith(("http://", "https://")):
        return "openai", model or "", spec.rstrip("/")  # no model: the server's only one (openai_chat)
    name, _, named_model = spec.partition(":")
    if name not in REGISTRY or not (model or named_model):
        raise UserError(f"--llm '{spec}' is not a model spec: use {SPEC_FORMS}")
    return name, model or named_model, None


def make_provider(spec: str, model: str | None = None, timeout_s: float = 120.0,
                  retries: int = 4) -> Provider:
    """The provider --llm names. timeout_s bounds each request; retries is how many more
    attempts a failed one gets (4: 0.5 + 1 + 2 + 4 s of back-off, ~8 s before giving up)."""
    name, model, base_url = parse_llm_spec(spec, model)
    return REGISTRY[name](model, base_url, timeout_s, retries)


def _openai(model: str, base_url: str | None, timeout_s: float, retries: int) -> Provider:
    from kernforge.propose.llm.providers.openai_chat import OpenAIChat

    return OpenAIChat(model, base_url, timeout_s, retries)


def _anthropic(model: str, base_url: str | None, timeout_s: float, retries: int) -> Provider:
    from kernforge.propose.llm.providers.anthropic_messages import AnthropicMessages

    return AnthropicMessages(model, base_url, timeout_s, retries)


# name -> (model, base_url, timeout_s, retries) -> Provider
REGISTRY: dict[str, Callable[[str, str | None, float, int], Provider]] = {
    "openai": _openai, "anthropic": _anthropic}


# -- shared by the provider files ------------------------------------------------------------


def import_sdk(package: str) -> ModuleType:
    """The official client library, imported only when an LLM is asked for."""
    try:
        return __import__(package)
    except ImportError:
        raise UserError(f"the llm proposer needs the {package} package; "
                        "pip install 'kernforge[llm]'") from None


def env_key(variables: tuple[str, ...], default: str | None, needed_by: str) -> tuple[str, str]:
    """(key, the variable it came from) from the first set variable; (default, "") when none is
    set and a default exists (local servers ignore the key), else a UserError naming the first."""
    for var in variables:
        if os.environ.get(var):
            return os.environ[var], var
    if default is None:
        raise UserError(f"{needed_by} needs an API key: set {variables[0]}")
    return default, ""


def scrub(text: str, secret: str) -> str:
    """text without the key; a server may echo a refused key back in its error message."""
    return text.replace(secret, "***") if len(secret) >= 4 else text


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _server_message(body: object) -> str:
    """The human part of an error body: openai {"error": {"message"}}, anthropic
    {"type": "error", "error": {"message"}}, vLLM {"message"}, FastAPI {"detail"}."""
    while isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if isinstance(body, Mapping):
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])
    return "" if body is None else str(body)


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    for header, seconds in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[header]) * seconds if headers else None
        except (KeyError, ValueError):
            continue
    return None


def retries_taken(raw_response: object) -> int:
    # The clients count the attempts they retried; versions before late 2024 do not say.
    return int(getattr(raw_response, "retries_taken", 0))


def _transport_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words, from the innermost cause."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "unknown host"
    return one_line(text, 80)


_STATUS_KINDS = (("AuthenticationError", "auth"), ("PermissionDeniedError", "auth"),
                 ("NotFoundError", "not_found"), ("BadRequestError", "bad_request"),
                 ("UnprocessableEntityError", "bad_request"), ("RateLimitError", "rate_limit"))
_PHRASES = {"auth": "refused the key", "not_found": "not found", "bad_request": "bad request",
            "rate_limit": "rate limited", "server": "server error"}


def error_kind(exc: Exception, sdk: ModuleType) -> str:
    """The ProviderError kind of one of the SDK's exceptions (openai and anthropic name their
    exception classes alike, so one table serves both)."""
    if isinstance(exc, sdk.APITimeoutError):
        return "timeout"
    if isinstance(exc, sdk.APIConnectionError):
        return "connection"
    for class_name, kind in _STATUS_KINDS:
        if isinstance(exc, getattr(sdk, class_name)):
            return kind
    status = getattr(exc, "status_code", None)
    return "server" if status is None or status >= 500 else "bad_request"


def provider_error(exc: Exception, sdk: ModuleType, label: str, secret: str,
                   timeout_s: float) -> ProviderError:
    """One line for a failed call: "openai:gpt-4.1: 429 rate limited: <the server's words>"."""
    kind = error_kind(exc, sdk)
    if kind in ("timeout", "connection"):
        reason = (f"no answer within {timeout_s:g} s" if kind == "timeout"
                  else _transport_reason(exc))
        return ProviderError(kind, f"{label}: {kind}: {scrub(reason, secret)}",
                             reason=scrub(reason, secret))
    status: int | None = getattr(exc, "status_code", None)
    response: Any = getattr(exc, "response", None)
    reason = one_line(scrub(_server_message(getattr(exc, "body", None)) or str(exc), secret))
    return ProviderError(kind, f"{label}: {status} {_PHRASES[kind]}: {reason}",
                         retry_after_s(response.headers if response is not None else None),
                         status=status, reason=reason)


def check_failure(err: ProviderError, endpoint: str, model: str, key_var: str,
                  timeout_s: float) -> UserError:
    """The one line a failed check() shows, naming the fix."""
    if err.kind == "connection":
        return UserError(f"the LLM endpoint {endpoint} does not answer ({err.reason}): "
                         "is the server running? check --llm")
    if err.kind == "timeout":
        return UserError(f"the LLM endpoint {endpoint} did not answer within {timeout_s:g} s: "
                         "is the server up and the model loaded? check --llm")
    if err.kind == "auth" and key_var:
        return UserError(f"{key_var} was refused by {endpoint} ({err.status}): set a valid key")
    if err.kind == "auth":
        return UserError(f"{endpoint} wants an API key ({err.status}): "
                         "set KERNFORGE_LLM_API_KEY")
    if err.kind == "not_found":
        return model_not_found(model, endpoint, [])
    return UserError(f"{err.message}; check --llm and --llm-model")


def model_not_found(model: str, endpoint: str, available: list[str]) -> UserError:
    # A handful of ids is enough to spot a typo; hosted APIs list a hundred.
    fix = (f"pick one of {', '.join(available[:8])}{', ...' if len(available) > 8 else ''}"
           if available else "check the name")
    return UserError(f"model '{model}' is not served by {endpoint}: {fix} with --llm-model")
