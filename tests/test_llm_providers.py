"""The LLM providers against real HTTP servers on loopback (tests/llm_server.py), through the
official openai and anthropic clients: answers, retries and their timing, error kinds, the
one-line check() errors, and that no API key leaks into any text they make."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from llm_server import FakeLLM, Scripted

from kernforge.errors import UserError
from kernforge.propose.llm.prices import (
    BUILTIN_PRICES,
    Price,
    cost_usd,
    load_prices,
    price_for,
)
from kernforge.propose.llm.providers import (
    Message,
    Provider,
    ProviderError,
    make_provider,
    parse_llm_spec,
)

pytestmark = pytest.mark.unit

KEY = "sk-test-secret"
WRONG_KEY = "sk-wrong-key-0123456789"
ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
            "ANTHROPIC_AUTH_TOKEN", "KERNFORGE_LLM_API_KEY")
PROTOCOLS = ("openai", "anthropic")
HI = [Message("user", "hi")]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


def provider_for(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, key: str = KEY,
                 model: str = "fake-coder", **kwargs: float) -> Provider:
    """The provider a user gets for this server: a URL spec for openai, anthropic:MODEL with
    ANTHROPIC_BASE_URL for anthropic."""
    if llm.protocol == "openai":
        monkeypatch.setenv("KERNFORGE_LLM_API_KEY", key)
        return make_provider(llm.url, model, **kwargs)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url)
    return make_provider(f"anthropic:{model}", **kwargs)


def provider_label(llm: FakeLLM, model: str = "fake-coder") -> str:
    return f"{llm.url} {model}" if llm.protocol == "openai" else f"anthropic:{model}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_one_line_without(text: str, secret: str) -> None:
    assert "\n" not in text
    assert secret not in text


# -- spec parsing ------------------------------------------------------------------------------


def test_spec_forms() -> None:
    assert parse_llm_spec("openai:gpt-4.1", None) == ("openai", "gpt-4.1", None)
    assert parse_llm_spec("anthropic:claude-sonnet-4-5", None) == (
        "anthropic", "claude-sonnet-4-5", None)
    assert parse_llm_spec("http://127.0.0.1:8000/v1/", "qwen2.5-coder") == (
        "openai", "qwen2.5-coder", "http://127.0.0.1:8000/v1")
    assert parse_llm_spec("https://api.example.com/v1", "m")[2] == "https://api.example.com/v1"


def test_llm_model_overrides_the_named_model() -> None:
    assert parse_llm_spec("openai:gpt-4.1", "gpt-4.1-mini")[1] == "gpt-4.1-mini"
    assert parse_llm_spec("anthropic:", "claude-haiku-4-5")[1] == "claude-haiku-4-5"


def test_url_without_model_leaves_the_model_to_the_server() -> None:
    assert parse_llm_spec("http://127.0.0.1:8000/v1", None) == ("openai", "", "http://127.0.0.1:8000/v1")


def test_a_server_of_one_model_needs_no_llm_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM("openai", [Scripted("ok")], models=("coder-only",)) as llm:
        monkeypatch.setenv("KERNFORGE_LLM_API_KEY", KEY)
        provider = make_provider(llm.url)
        assert provider.model == "coder-only" and provider.label == f"{llm.url} coder-only"
        assert provider.complete("", HI, 5).text == "ok"
    assert llm.completions[0]["model"] == "coder-only"


def test_a_server_of_several_models_or_no_list_asks_for_llm_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNFORGE_LLM_API_KEY", KEY)
    with FakeLLM("openai", [Scripted("never")], models=("coder-b", "coder-a")) as llm:
        with pytest.raises(UserError) as several:
            make_provider(llm.url)
    assert str(several.value) == f"{llm.url} serves 2 models (coder-a, coder-b): pick one with --llm-model NAME"
    with FakeLLM("openai", [Scripted("never")], serve_models=False) as llm:
        with pytest.raises(UserError, match="did not list its models .*--llm-model NAME"):
            make_provider(llm.url)


@pytest.mark.parametrize("spec", ["gpt-4.1", "gemini:pro", "openai:", "ftp://host/v1", ""])
def test_bad_spec_lists_the_three_forms(spec: str) -> None:
    with pytest.raises(UserError) as e:
        parse_llm_spec(spec, None)
    assert all(form in str(e.value) for form in ("openai:MODEL", "anthropic:MODEL", "http://"))


@pytest.mark.parametrize(("spec", "var"), [("openai:gpt-4.1", "OPENAI_API_KEY"),
                                           ("anthropic:claude-sonnet-4", "ANTHROPIC_API_KEY")])
def test_missing_key_names_the_variable(spec: str, var: str) -> None:
    with pytest.raises(UserError, match=f"set {var}"):
        make_provider(spec)


def test_missing_client_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    with pytest.raises(UserError, match=r"kernforge\[llm\]"):
        make_provider("http://127.0.0.1:8000/v1", "m")


def test_url_key_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """KERNFORGE_LLM_API_KEY, else OPENAI_API_KEY, else "none" (local servers ignore it)."""
    with FakeLLM("openai", [Scripted("ok")], key=None) as llm:
        sent = []
        for env in ({}, {"OPENAI_API_KEY": "sk-openai"},
                    {"OPENAI_API_KEY": "sk-openai", "KERNFORGE_LLM_API_KEY": "sk-kf"}):
            for var, value in env.items():
                monkeypatch.setenv(var, value)
            make_provider(llm.url, "fake-coder").complete("", HI, 5)
            sent.append(llm.requests[-1]["headers"]["authorization"])
    assert sent == ["Bearer none", "Bearer sk-openai", "Bearer sk-kf"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hosted_forms_take_the_base_url_variable(protocol: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("from env url")]) as llm:
        monkeypatch.setenv(f"{protocol.upper()}_API_KEY", KEY)
        monkeypatch.setenv(f"{protocol.upper()}_BASE_URL", llm.url)
        provider = make_provider(f"{protocol}:fake-coder")
        assert provider.label == f"{protocol}:fake-coder"
        assert provider.complete("", HI, 5).text == "from env url"


# -- completions -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_completion_returns_text_and_tokens(protocol: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("a kernel", prompt_tokens=120, completion_tokens=7)]) as llm:
        provider = provider_for(llm, monkeypatch)
        got = provider.complete("you write kernels", [Message("user", "softmax"),
                                                      Message("assistant", "ok"),
                                                      Message("user", "faster")], 64)
    assert (got.text, got.prompt_tokens, got.completion_tokens) == ("a kernel", 120, 7)
    assert got.model == "fake-coder" and got.retries == 0 and got.latency_s > 0
    assert got.stop_reason == ("stop" if protocol == "openai" else "end_turn")
    body = llm.completions[0]
    assert body["max_tokens"] == 64
    if protocol == "openai":
        assert body["messages"][0] == {"role": "system", "content": "you write kernels"}
        assert [m["role"] for m in body["messages"][1:]] == ["user", "assistant", "user"]
    else:
        assert body["system"] == "you write kernels"
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_openai_without_usage_counts_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Some local servers send no usage; tokens are then 0, not an error."""
    with FakeLLM("openai", [Scripted("x", prompt_tokens=0, completion_tokens=0)]) as llm:
        got = provider_for(llm, monkeypatch).complete("", HI, 5)
    assert (got.prompt_tokens, got.completion_tokens) == (0, 0)


def test_openai_falls_back_to_max_completion_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = Scripted(status=400, text="Unsupported parameter: 'max_tokens' is not supported "
                                        "with this model. Use 'max_completion_tokens' instead.")

    def reply(body: dict) -> Scripted:
        return refusal if "max_tokens" in body else Scripted("new model")

    with FakeLLM("openai", reply) as llm:
        provider = provider_for(llm, monkeypatch)
        assert provider.complete("", HI, 9).text == "new model"
        assert provider.complete("", HI, 9).text == "new model"
    # The refusal is remembered: the second call goes straight to max_completion_tokens.
    assert ["max_tokens" in b for b in llm.completions] == [True, False, False]
    assert llm.completions[-1]["max_completion_tokens"] == 9


# -- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_429_honours_retry_after(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    limited = Scripted(status=429, headers={"Retry-After": "1"})
    with FakeLLM(protocol, [limited, Scripted("after the wait")]) as llm:
        provider = provider_for(llm, monkeypatch)
        start = time.perf_counter()
        got = provider.complete("", HI, 5)
        elapsed = time.perf_counter() - start
    # The clients' own back-off would be 0.5 s (less jitter); 1 s is the server's.
    assert got.text == "after the wait" and got.retries == 1
    assert elapsed >= 1.0 and got.latency_s >= 1.0
    assert len(llm.completions) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_500_is_retried(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted(status=500), Scripted("recovered")]) as llm:
        got = provider_for(llm, monkeypatch).complete("", HI, 5)
    assert got.text == "recovered" and got.retries == 1 and len(llm.completions) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_after_retries_keeps_retry_after(protocol: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted(status=429, text="slow down",
                                     headers={"Retry-After": "7"})]) as llm:
        with pytest.raises(ProviderError) as e:
            provider_for(llm, monkeypatch, retries=0).complete("", HI, 5)
    assert e.value.kind == "rate_limit" and e.value.retry_after_s == 7.0
    assert str(e.value) == f"{provider_label(llm)}: 429 rate limited: slow down"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_timeout_is_retried_then_raised(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("too late", delay_s=5)]) as llm:
        provider = provider_for(llm, monkeypatch, timeout_s=0.3, retries=1)
        start = time.perf_counter()
        with pytest.raises(ProviderError) as e:
            provider.complete("", HI, 5)
        elapsed = time.perf_counter() - start
        attempts = len(llm.completions)
    assert e.value.kind == "timeout" and "0.3 s" in str(e.value)
    assert attempts == 2 and 0.6 <= elapsed < 3


# -- errors and check() ------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_refused_key(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake echoes the refused key in its message, as a careless server might."""
    with FakeLLM(protocol, [Scripted("never")]) as llm:
        provider = provider_for(llm, monkeypatch, key=WRONG_KEY)
        with pytest.raises(ProviderError) as call:
            provider.complete("", HI, 5)
        with pytest.raises(UserError) as check:
            provider.check()
    assert call.value.kind == "auth" and call.value.status == 401
    var = "KERNFORGE_LLM_API_KEY" if protocol == "openai" else "ANTHROPIC_API_KEY"
    assert str(check.value) == f"{var} was refused by {llm.url} (401): set a valid key"
    for text in (str(call.value), call.value.reason, repr(call.value), str(check.value),
                 provider.label, repr(provider)):
        assert_one_line_without(text, WRONG_KEY)
    assert llm.completions == []  # refused before any reply was taken


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_passes_for_a_served_model(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("ok")]) as llm:
        provider_for(llm, monkeypatch).check()
    assert llm.completions == []  # the model list or record answered; no tokens spent


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_names_an_unknown_model(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("ok")], models=("coder-a", "coder-b")) as llm:
        provider = provider_for(llm, monkeypatch, model="coder-nope")
        with pytest.raises(UserError) as e:
            provider.check()
        with pytest.raises(ProviderError) as call:
            provider.complete("", HI, 5)
    assert str(e.value) == (f"model 'coder-nope' is not served by {llm.url}: "
                            "pick one of coder-a, coder-b with --llm-model")
    assert call.value.kind == "not_found"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_without_a_models_route_asks_for_one_token(protocol: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(protocol, [Scripted("ok")], serve_models=False) as llm:
        provider_for(llm, monkeypatch).check()
        assert [b["max_tokens"] for b in llm.completions] == [1]
        with pytest.raises(UserError, match="model 'nope' is not served by"):
            provider_for(llm, monkeypatch, model="nope").check()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_check_of_a_closed_port(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    if protocol == "openai":
        url += "/v1"
        provider = make_provider(url, "m", retries=4)
    else:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        provider = make_provider("anthropic:m", retries=4)
    start = time.perf_counter()
    with pytest.raises(UserError) as e:
        provider.check()
    assert str(e.value) == (f"the LLM endpoint {url} does not answer (connection refused): "
                            "is the server running? check --llm")
    assert time.perf_counter() - start < 3  # check() retries once, not the full 4


def test_connection_error_of_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = make_provider(f"http://127.0.0.1:{closed_port()}/v1", "m", retries=0)
    with pytest.raises(ProviderError) as e:
        provider.complete("", HI, 5)
    assert e.value.kind == "connection" and "connection refused" in str(e.value)


def test_fake_server_exits_while_a_reply_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM("openai", [Scripted("late", delay_s=30)]) as llm:
        provider = provider_for(llm, monkeypatch, timeout_s=0.2, retries=0)
        with pytest.raises(ProviderError):
            provider.complete("", HI, 5)
        start = time.perf_counter()
    assert time.perf_counter() - start < 1


# -- prices ------------------------------------------------------------------------------------


def test_price_prefix_lookup() -> None:
    table = load_prices(None)
    assert price_for("gpt-4.1-2025-04-14", table) == BUILTIN_PRICES["gpt-4.1"]
    # The longest key wins: a mini snapshot is not priced as its big sibling.
    assert price_for("gpt-4.1-mini-2025-04-14", table) == BUILTIN_PRICES["gpt-4.1-mini"]
    assert price_for("gpt-4o-mini", table) == BUILTIN_PRICES["gpt-4o-mini"]
    assert price_for("claude-sonnet-4-5-20250929", table) == Price(3.0, 15.0)
    assert price_for("qwen2.5-coder", table) is None


def test_cost_usd() -> None:
    assert cost_usd(Price(2.0, 8.0), 1_000_000, 500_000) == pytest.approx(6.0)
    assert cost_usd(Price(2.0, 8.0), 0, 0) == 0.0


def test_user_prices_override_and_extend(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-4.1": {"input_per_mtok": 1.5, "output_per_mtok": 6},
                                "qwen2.5-coder": {"input_per_mtok": 0, "output_per_mtok": 0.1}}))
    table = load_prices(path)
    assert price_for("gpt-4.1-2025-04-14", table) == Price(1.5, 6.0)
    assert price_for("qwen2.5-coder:latest", table) == Price(0.0, 0.1)
    assert price_for("gpt-4o", table) == BUILTIN_PRICES["gpt-4o"]
    # A model served from a URL gets the user's prices only.
    assert set(load_prices(path, builtin=False)) == {"gpt-4.1", "qwen2.5-coder"}


@pytest.mark.parametrize("text", [
    "{not json",
    '["gpt-4.1"]',
    '{"gpt-4.1": 2.0}',
    '{"gpt-4.1": {"input_per_mtok": 2.0}}',
    '{"gpt-4.1": {"input_per_mtok": 2.0, "output_per_mtok": "8"}}',
    '{"gpt-4.1": {"input_per_mtok": -1, "output_per_mtok": 8}}',
    '{"gpt-4.1": {"input": 2.0, "output": 8.0}}',
])
def test_malformed_prices_file_names_file_and_form(tmp_path: Path, text: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_prices(path)
    assert str(path) in str(e.value) and "input_per_mtok" in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_prices_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read the prices file"):
        load_prices(tmp_path / "absent.json")
