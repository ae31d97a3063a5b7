"""Anthropic's Messages API, through the official anthropic client."""

from __future__ import annotations

import time
from typing import Any

from kernforge.propose.llm.providers import (
    Completion,
    Message,
    ProviderError,
    check_failure,
    env_key,
    import_sdk,
    model_not_found,
    provider_error,
    retries_taken,
)


class AnthropicMessages:
    name = "anthropic"

    def __init__(self, model: str, base_url: str | None, timeout_s: float, retries: int):
        self._sdk = import_sdk("anthropic")
        self.model = model
        self.label = f"anthropic:{model}"
        key, self._key_var = env_key(("ANTHROPIC_API_KEY",), None, self.label)
        self._secret = key
        self._timeout_s = timeout_s
        # base_url None: the client takes ANTHROPIC_BASE_URL, else Anthropic's API. An explicit
        # timeout also keeps the client from refusing large max_tokens without streaming.
        self._client = self._sdk.Anthropic(api_key=key, base_url=base_url, timeout=timeout_s,
                                           max_retries=retries)
        self.endpoint = str(self._client.base_url).rstrip("/")

    def __repr__(self) -> str:
        return f"AnthropicMessages({self.label!r})"

    def complete(self, system: str, messages: list[Message], max_tokens: int) -> Completion:
        start = time.perf_counter()
        try:
            raw = self._raw_create(system, messages, max_tokens)
        except self._sdk.APIError as e:
            raise provider_error(e, self._sdk, self.label, self._secret, self._timeout_s) from None
        response = raw.parse()
        text = "".join(block.text for block in response.content if block.type == "text")
        return Completion(text=text, prompt_tokens=response.usage.input_tokens or 0,
                          completion_tokens=response.usage.output_tokens or 0,
                          latency_s=time.perf_counter() - start, model=response.model or self.model,
                          stop_reason=response.stop_reason or "", retries=retries_taken(raw))

    def check(self) -> None:
        """The model's own record; a 404 (an unknown model, or a proxy without /v1/models) is
        settled by asking for one token."""
        client = self._client.with_options(max_retries=min(self._client.max_retries, 1))
        try:
            client.models.retrieve(self.model)
            return
        except self._sdk.APIError as e:
            err = provider_error(e, self._sdk, self.label, self._secret, self._timeout_s)
        if err.kind != "not_found":
            raise self._check_failure(err)
        try:
            self.complete("", [Message("user", "Say ok.")], max_tokens=1)
        except ProviderError as e:
            if e.kind == "not_found":
                raise model_not_found(self.model, self.endpoint, self._listed_models()) from None
            raise self._check_failure(e) from None

    def _listed_models(self) -> list[str]:
        """Some model ids to suggest; none when the endpoint cannot list them."""
        client = self._client.with_options(max_retries=0)
        try:
            return [m.id for m in client.models.list(limit=20).data]
        except self._sdk.APIError:
            return []

    def _check_failure(self, err: ProviderError) -> Exception:
        return check_failure(err, self.endpoint, self.model, self._key_var, self._timeout_s)

    def _raw_create(self, system: str, messages: list[Message], max_tokens: int) -> Any:
        """The raw response, which knows how many retries it took; .parse() is the message."""
        extra = {"system": system} if system else {}
        return self._client.messages.with_raw_response.create(
            model=self.model, max_tokens=max_tokens,
            messages=[{"role": m.role, "content": m.content} for m in messages], **extra)
