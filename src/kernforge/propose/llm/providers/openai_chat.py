"""OpenAI chat completions: OpenAI's API and every server that copies it (vLLM, Ollama,
llama.cpp's llama-server, LM Studio, OpenRouter...), through the official openai client."""

from __future__ import annotations

import time
from typing import Any

from kernforge.errors import UserError
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

# A server URL takes KERNFORGE_LLM_API_KEY first, so that a local server's key and the
# OPENAI_API_KEY of the user's shell stay apart; local servers ignore the key, hence "none".
_URL_KEY_VARS = ("KERNFORGE_LLM_API_KEY", "OPENAI_API_KEY")


class OpenAIChat:
    name = "openai"

    def __init__(self, model: str, base_url: str | None, timeout_s: float, retries: int):
        self._sdk = import_sdk("openai")
        if base_url is None:
            self.label = f"openai:{model}"
            key, self._key_var = env_key(("OPENAI_API_KEY",), None, self.label)
        else:
            self.label = f"{base_url} {model}"
            key, self._key_var = env_key(_URL_KEY_VARS, "none", base_url)
        self.model = model
        self._secret = key
        self._timeout_s = timeout_s
        # base_url None: the client takes OPENAI_BASE_URL, else OpenAI's API.
        self._client = self._sdk.OpenAI(api_key=key, base_url=base_url, timeout=timeout_s,
                                        max_retries=retries)
        self.endpoint = str(self._client.base_url).rstrip("/")
        if not model:  # a server's URL alone: the model it serves, where it serves one
            self.model = self._the_served_model()
            self.label = f"{base_url} {self.model}"
        # Newer OpenAI models refuse max_tokens; the first such refusal switches for good.
        self._token_param = "max_tokens"

    def __repr__(self) -> str:
        return f"OpenAIChat({self.label!r})"

    def complete(self, system: str, messages: list[Message], max_tokens: int) -> Completion:
        start = time.perf_counter()
        try:
            raw = self._create(system, messages, max_tokens)
        except self._sdk.APIError as e:
            raise provider_error(e, self._sdk, self.label, self._secret, self._timeout_s) from None
        response = raw.parse()
        if not response.choices:
            raise ProviderError("server", f"{self.label}: the answer has no choices")
        choice, usage = response.choices[0], response.usage
        return Completion(text=choice.message.content or "",
                          prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
                          completion_tokens=(usage.completion_tokens or 0) if usage else 0,
                          latency_s=time.perf_counter() - start, model=response.model or self.model,
                          stop_reason=choice.finish_reason or "", retries=retries_taken(raw))

    def check(self) -> None:
        """A model list that lacks the model is a UserError listing some that exist; a server
        without the list (404) is asked for one token instead."""
        try:
            served = self._served_models()
        except ProviderError as e:
            if e.kind != "not_found":
                raise self._check_failure(e) from None
            served = []
        if served and not _is_served(self.model, served):
            raise model_not_found(self.model, self.endpoint, sorted(served))
        if not served:
            try:
                self.complete("", [Message("user", "Say ok.")], max_tokens=1)
            except ProviderError as e:
                raise self._check_failure(e) from None

    def _served_models(self) -> list[str]:
        # One retry: a check that waits out the full back-off on a dead server is just slow.
        client = self._client.with_options(max_retries=min(self._client.max_retries, 1))
        try:
            return [m.id for m in client.models.list()]
        except self._sdk.APIError as e:
            raise provider_error(e, self._sdk, self.label, self._secret, self._timeout_s) from None

    def _the_served_model(self) -> str:
        """The one model the server lists; else a UserError asking for --llm-model (naming the
        models where it serves several)."""
        try:
            served = sorted(self._served_models())
        except ProviderError as e:
            raise UserError(f"{self.endpoint} did not list its models ({e.kind}): give the model with "
                            "--llm-model NAME") from None
        if len(served) == 1:
            return served[0]
        if not served:
            raise UserError(f"{self.endpoint} lists no model: give the model with --llm-model NAME")
        shown = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
        raise UserError(f"{self.endpoint} serves {len(served)} models ({shown}): pick one with --llm-model NAME")

    def _check_failure(self, err: ProviderError) -> Exception:
        return check_failure(err, self.endpoint, self.model, self._key_var, self._timeout_s)

    def _create(self, system: str, messages: list[Message], max_tokens: int) -> Any:
        try:
            return self._raw_create(system, messages, max_tokens)
        except self._sdk.BadRequestError as e:
            if self._token_param != "max_tokens" or not _wants_max_completion_tokens(e):
                raise
            self._token_param = "max_completion_tokens"
            return self._raw_create(system, messages, max_tokens)

    def _raw_create(self, system: str, messages: list[Message], max_tokens: int) -> Any:
        """The raw response, which knows how many retries it took; .parse() is the completion."""
        chat = [{"role": "system", "content": system}] if system else []
        chat += [{"role": m.role, "content": m.content} for m in messages]
        return self._client.chat.completions.with_raw_response.create(
            model=self.model, messages=chat, **{self._token_param: max_tokens})


def _wants_max_completion_tokens(err: Exception) -> bool:
    """OpenAI's words: "Unsupported parameter: 'max_tokens' is not supported with this model.
    Use 'max_completion_tokens' instead." """
    text = str(err).lower()
    return "max_tokens" in text and ("max_completion_tokens" in text or "unsupported" in text)


def _is_served(model: str, served: list[str]) -> bool:
    # Ollama lists "qwen2.5-coder:latest" and answers to "qwen2.5-coder".
    return model in served or f"{model}:latest" in served
