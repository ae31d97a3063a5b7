"""Models from the libraries users have (torchvision, timm, transformers, diffusers) and the
bundled examples built on them, loaded and captured at the ATen level on a CPU.

Each expensive capture is made once per module; the transformer and diffusers examples run
at scale "small" (full size is for GPUs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP

from kernforge.capture import capture_model
from kernforge.errors import UserError
from kernforge.models import ModelOptions, bundled_examples, load_model, run_forward
from kernforge.models.zoo import CONFIGS_DIR

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("zoo")]  # one worker: module fixtures made once

CPU = torch.device("cpu")
SMALL = ModelOptions(scale="small")
RMSNORM_PIECES = ("aten::pow.Tensor_Scalar", "aten::mean.dim", "aten::rsqrt.default")


def bundled_config(name: str) -> dict:
    return json.loads((CONFIGS_DIR / f"{name}.json").read_text())


def by_op(capture) -> dict[str, list]:
    ops: dict[str, list] = {}
    for p in capture.profiles:
        ops.setdefault(p.op, []).append(p)
    return ops


def first_shape(profile) -> list[int]:
    return profile.args[0]["shape"]


def test_the_zoo_examples_are_bundled():
    assert {"resnet50", "gemma_decoder", "qwen_moe", "sd35_vae_decoder"} <= set(bundled_examples())


# ---------------------------------------------------------------- ResNet-50

# Captured at batch 2, not its default 8: the same layers and feature maps for a quarter of the
# forward passes the capture times.
RESNET_BATCH = 2
# and at 112 x 112: the same layers at a quarter of the pixels (the capture took 44 s at 224)
RESNET_SIDE = 112


def test_resnet50_defaults_to_batch_8_at_224():
    (x,) = load_model("example:resnet50", CPU).inputs
    assert x.shape == (8, 3, 224, 224)


@pytest.mark.parametrize("name", ["attention", "resnet50"])
def test_the_examples_without_a_config_are_smaller_at_scale_small(name):
    """--scale small is honoured by the examples built in code (the language models and the VAE
    read a config named by the scale: the tests below load the small ones)."""
    from kernforge.models.loader import _from_example

    _, full, _ = _from_example(name, ModelOptions(scale="full"))
    _, small, _ = _from_example(name, SMALL)
    sizes = [(a.numel(), b.numel()) for a, b in zip(full, small) if isinstance(a, torch.Tensor)]
    assert sizes and all(s <= f for f, s in sizes) and any(s < f for f, s in sizes), (name, sizes)


@pytest.fixture(scope="module")
def resnet50_capture():
    torch.manual_seed(0)
    loaded = load_model("example:resnet50", CPU, ModelOptions(batch_size=RESNET_BATCH, resolution=RESNET_SIDE))
    return loaded, capture_model(loaded, out_dir=None, repeats=2)


def test_resnet50_is_captured_at_the_asked_batch(resnet50_capture):
    loaded, cap = resnet50_capture
    (x,) = loaded.inputs
    assert x.shape == (RESNET_BATCH, 3, RESNET_SIDE, RESNET_SIDE)
    assert cap.model == "resnet50" and cap.device == "cpu" and cap.repeats == 2


def test_resnet50_adaptive_avg_pool_is_captured_on_the_final_feature_map(resnet50_capture):
    _, cap = resnet50_capture
    pools = [p for p in cap.profiles
             if p.op == "aten::mean.dim" or p.op.startswith("aten::adaptive_avg_pool2d")]
    assert pools, sorted(by_op(cap))
    (pool,) = [p for p in pools if first_shape(p) == [RESNET_BATCH, 2048, 4, 4]]  # 112 / 32, rounded up
    assert pool.kind == "compute"
    assert pool.calls == 1
    assert pool.module == "avgpool"  # torchvision's ResNet names its pooling layer avgpool
    assert pool.schema.startswith(f"{pool.op}(")  # the overload's full schema


def test_resnet50_shares_sum_to_one(resnet50_capture):
    _, cap = resnet50_capture
    # the single ops' shares; its chains (bn, relu_; bn, add_, relu_) rank beside them over the same calls
    assert sum(p.share for p in cap.profiles if p.kind != "chain") == pytest.approx(1.0, abs=1e-6)
    assert any(p.kind == "chain" and p.op == "chain:native_batch_norm+relu_" for p in cap.profiles)
    convs = by_op(cap)["aten::convolution.default"]
    # ResNet-50: 16 bottlenecks of 3 convs, 4 downsamples, the stem
    assert sum(p.calls for p in convs) == 53


# ---------------------------------------------------------------- Gemma-3 decoder (small)

GEMMA_BATCH, GEMMA_SEQ = 2, 24


@pytest.fixture(scope="module")
def gemma_capture():
    torch.manual_seed(0)
    opts = ModelOptions(scale="small", batch_size=GEMMA_BATCH, seq_len=GEMMA_SEQ)
    loaded = load_model("example:gemma_decoder", CPU, opts)
    return loaded, capture_model(loaded, out_dir=None, repeats=1)


def test_gemma_attention_softmax_is_over_the_sequence(gemma_capture):
    loaded, cap = gemma_capture
    (ids,) = loaded.inputs
    assert ids.shape == (GEMMA_BATCH, GEMMA_SEQ)
    heads = bundled_config("gemma3_text_small")["num_attention_heads"]
    shapes = [first_shape(p) for p in by_op(cap).get(SOFTMAX_OP, [])]
    assert [GEMMA_BATCH, heads, GEMMA_SEQ, GEMMA_SEQ] in shapes, shapes
    (attn,) = [p for p in cap.profiles if p.op == SOFTMAX_OP and first_shape(p)[-1] == GEMMA_SEQ]
    assert "self_attn" in attn.module
    assert attn.calls == bundled_config("gemma3_text_small")["num_hidden_layers"]


def test_gemma_hand_written_rmsnorm_arrives_as_its_pieces_in_the_norm_modules(gemma_capture):
    _, cap = gemma_capture
    ops = by_op(cap)
    for piece in RMSNORM_PIECES:
        assert piece in ops, f"{piece} missing from {sorted(ops)}"
        modules = [p.module for p in ops[piece]]
        assert all("norm" in m for m in modules), (piece, modules)
        assert any(m.endswith("layernorm") for m in modules), (piece, modules)
    # the decoder layers' norm on hidden states: (B, S, hidden) reduced over the last dim
    hidden = bundled_config("gemma3_text_small")["hidden_size"]
    for piece in ("aten::pow.Tensor_Scalar", "aten::mean.dim"):
        seen = [(first_shape(p), p.module) for p in ops[piece]]
        assert any(shape == [GEMMA_BATCH, GEMMA_SEQ, hidden] and module.endswith("layernorm")
                   for shape, module in seen), seen


# ---------------------------------------------------------------- Qwen-3-MoE decoder (small)

@pytest.fixture(scope="module")
def qwen_capture():
    torch.manual_seed(0)
    # seq 24 != 32 experts, so that only the router's softmax has a last dim of 32
    opts = ModelOptions(scale="small", batch_size=2, seq_len=24)
    loaded = load_model("example:qwen_moe", CPU, opts)
    return loaded, capture_model(loaded, out_dir=None, repeats=1)


def test_qwen_moe_router_softmax_is_over_the_experts(qwen_capture):
    _, cap = qwen_capture
    config = bundled_config("qwen3_moe_small")
    experts = config["num_experts"]
    assert experts == 32
    softmaxes = by_op(cap)[SOFTMAX_OP]
    routers = [p for p in softmaxes if first_shape(p)[-1] == experts]
    assert routers, [first_shape(p) for p in softmaxes]
    (router,) = routers
    assert first_shape(router) == [2 * 24, experts]  # every token of every sequence is routed
    assert router.args[1] == -1
    assert ".mlp" in router.module
    assert router.calls == config["num_hidden_layers"]
    # the attention softmax is there too, over the 24 tokens
    assert any(first_shape(p) == [2, config["num_attention_heads"], 24, 24] for p in softmaxes)


# ---------------------------------------------------------------- SD-3.5 VAE decoder (small)

@pytest.fixture(scope="module")
def vae_capture():
    torch.manual_seed(0)
    loaded = load_model("example:sd35_vae_decoder", CPU, SMALL)
    return loaded, capture_model(loaded, out_dir=None, repeats=1)


def test_vae_decoder_group_norm_has_32_groups(vae_capture):
    loaded, cap = vae_capture
    (latents,) = loaded.inputs
    assert latents.shape == (1, 16, 8, 8)  # small: 8 x 8 latents with 16 channels
    norms = by_op(cap).get("aten::native_group_norm.default", [])
    assert norms, sorted(by_op(cap))
    groups = bundled_config("sd35_vae_small")["norm_num_groups"]
    assert groups == 32
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps)
    for p in norms:
        assert p.args[6] == groups, p.args
        assert p.args[4] == first_shape(p)[1]
        assert "vae.decoder" in p.module
    assert any(p.module.endswith("norm1") for p in norms)


# ---------------------------------------------------------------- zoo specs and options

def test_torchvision_model_in_bf16_runs_in_bf16():
    loaded = load_model("torchvision:resnet18", CPU,
                        ModelOptions(batch_size=2, resolution=32, dtype="bf16"))
    (x,) = loaded.inputs
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.bfloat16
    assert {p.dtype for p in loaded.module.parameters()} == {torch.bfloat16}
    cap = capture_model(loaded, out_dir=None, repeats=1)
    ops = by_op(cap)
    assert ops["aten::convolution.default"][0].dtype_text == "bfloat16"
    assert {p.dtype_text for p in cap.ranked()} == {"bfloat16"}
    floats = {t["dtype"] for p in cap.profiles for t in p.outputs if "float" in t["dtype"]}
    assert floats == {"torch.bfloat16"}


def test_timm_model_loads_at_the_asked_resolution():
    loaded = load_model("timm:resnet18", CPU, ModelOptions(batch_size=2, resolution=32))
    assert loaded.name == "resnet18"
    (x,) = loaded.inputs
    assert x.shape == (2, 3, 32, 32)
    assert run_forward(loaded).shape == (2, 1000)


def test_hf_model_from_the_bundled_config_name():
    loaded = load_model("hf:gemma3_text_small", CPU, ModelOptions(batch_size=2, seq_len=8))
    config = bundled_config("gemma3_text_small")
    assert loaded.name == "gemma3_text_small"
    assert loaded.module.model.config.hidden_size == config["hidden_size"]
    assert loaded.module.model.config.num_hidden_layers == config["num_hidden_layers"]
    (ids,) = loaded.inputs
    assert ids.shape == (2, 8) and ids.dtype == torch.int64
    assert int(ids.max()) < config["vocab_size"]
    assert run_forward(loaded).shape == (2, 8, config["vocab_size"])


def test_hf_model_from_a_config_json_path(tmp_path: Path):
    path = tmp_path / "config.json"
    config = bundled_config("gemma3_text_small")
    path.write_text(json.dumps({**config, "hidden_size": 32, "head_dim": 8}))
    loaded = load_model(f"hf:{path}", CPU, ModelOptions(seq_len=4))
    # the file's own values, not the bundled ones
    assert loaded.module.model.config.hidden_size == 32
    assert run_forward(loaded).shape == (1, 4, config["vocab_size"])


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """A tiny Gemma-3 saved with its weights; the weights are not what a random init gives."""
    import transformers

    raw = {k: v for k, v in bundled_config("gemma3_text_small").items() if k != "_comment"}
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(0.25 + i)  # far from any init: norms start at 0, embeddings near 0
    folder = tmp_path_factory.mktemp("hf") / "ckpt"
    model.save_pretrained(folder)
    return folder, {k: v.clone() for k, v in model.state_dict().items()}


def test_hf_folder_with_weights_loads_them(hf_checkpoint):
    folder, saved = hf_checkpoint
    assert list(folder.glob("*.safetensors"))
    loaded = load_model(f"hf:{folder}", CPU, ModelOptions(seq_len=8))
    state = loaded.module.model.state_dict()
    assert state.keys() == saved.keys()
    for name, value in saved.items():
        assert torch.equal(state[name], value), name
    assert run_forward(loaded).shape == (1, 8, bundled_config("gemma3_text_small")["vocab_size"])


def test_hf_folder_without_weights_is_randomly_initialised(hf_checkpoint, tmp_path: Path):
    folder, saved = hf_checkpoint
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    loaded = load_model(f"hf:{tmp_path}", CPU, ModelOptions(seq_len=8))
    state = loaded.module.model.state_dict()
    assert state.keys() == saved.keys()
    assert not any(torch.equal(state[name], value) for name, value in saved.items())


def test_diffusers_vae_decodes_latents_to_an_image_8x_larger():
    loaded = load_model("diffusers:sd35_vae_small", CPU, ModelOptions(batch_size=2, resolution=4))
    (latents,) = loaded.inputs
    assert latents.shape == (2, 16, 4, 4)
    image = run_forward(loaded)
    assert image.shape == (2, 3, 32, 32)


# ---------------------------------------------------------------- user errors, one line each

def one_line(info: pytest.ExceptionInfo) -> str:
    message = str(info.value)
    assert message and "\n" not in message, message
    return message


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"dtype": "fp8"}, "unknown dtype 'fp8'; choose one of: fp32, bf16, fp16"),
    ({"batch_size": 0}, "--batch-size must be at least 1, got 0"),
    ({"seq_len": -3}, "--seq-len must be at least 1, got -3"),
    ({"resolution": 0}, "--resolution must be at least 1, got 0"),
    ({"scale": "huge"}, "unknown scale 'huge'"),
])
def test_bad_model_options_are_one_line_user_errors(kwargs, words):
    with pytest.raises(UserError) as info:
        ModelOptions(**kwargs)
    assert words in one_line(info)


@pytest.mark.parametrize(("spec", "config", "words"), [
    ("hf", {"hidden_size": 64, "vocab_size": 512}, "has no model_type"),
    ("diffusers", {"_class_name": "NoSuchAutoencoder"}, "names no diffusers class"),
    ("diffusers", {"in_channels": 3}, "names no diffusers class"),
    ("diffusers", {"_class_name": "UNet2DModel", "sample_size": 8},
     "no input recipe for diffusers' UNet2DModel"),
])
def test_bad_zoo_configs_are_one_line_user_errors(tmp_path: Path, spec, config, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UserError) as info:
        load_model(f"{spec}:{path}", CPU)
    assert words in one_line(info)


def test_invalid_json_config_is_a_user_error(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(UserError) as info:
        load_model(f"hf:{path}", CPU)
    assert "is not valid JSON" in one_line(info)
