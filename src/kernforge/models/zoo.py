"""Models from the libraries users already have: torchvision, timm, transformers, diffusers.

Every model is built from code and a config with random weights; nothing is
downloaded. Weights are loaded only when a transformers config directory holds
them on disk. Each builder returns (module, inputs) for ModelOptions.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kernforge.errors import UserError
from kernforge.models.options import ModelOptions

CONFIGS_DIR = Path(__file__).parent / "configs"
_INSTALL = {"torchvision": "torchvision", "timm": "timm", "transformers": "transformers",
            "diffusers": "diffusers"}


def require(package: str) -> Any:
    """Import an optional package, or say in one line how to install it."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise UserError(f"this model spec needs {package} ({e}); pip install '{_INSTALL[package]}' "
                        "or pip install 'kernforge[zoo]'") from None


def bundled_configs() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))


def read_config(name_or_path: str) -> tuple[dict[str, Any], Path | None]:
    """A bundled config by name, a config.json, or a directory holding one (and maybe weights)."""
    bundled = CONFIGS_DIR / f"{name_or_path}.json"
    path = bundled if bundled.is_file() else Path(name_or_path)
    folder = None
    if path.is_dir():
        folder, path = path, path / "config.json"
    if not path.is_file():
        raise UserError(f"no config '{name_or_path}': give a config.json, a folder with one, or a "
                        f"bundled name ({', '.join(bundled_configs())})")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"'{path}' is not valid JSON: {e}") from None
    return {k: v for k, v in config.items() if k != "_comment"}, folder


# ---------------------------------------------------------------- torchvision / timm

def torchvision_model(name: str, opts: ModelOptions) -> tuple[nn.Module, tuple[Any, ...]]:
    models = require("torchvision").models
    try:
        model = models.get_model(name, weights=None)
    except ValueError:
        raise UserError(f"torchvision has no model '{name}'; see torchvision.models.list_models()") from None
    side = opts.side(224)
    return model, (torch.randn(opts.batch(1), 3, side, side),)


def timm_model(name: str, opts: ModelOptions) -> tuple[nn.Module, tuple[Any, ...]]:
    timm = require("timm")
    try:
        model = timm.create_model(name, pretrained=False)
    except RuntimeError as e:
        raise UserError(f"timm cannot build '{name}' ({e}); see timm.list_models()") from None
    channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    if opts.resolution:
        height = width = opts.resolution
    return model, (torch.randn(opts.batch(1), channels, height, width),)


# ---------------------------------------------------------------- transformers

def hf_model(config_ref: str, opts: ModelOptions) -> tuple[nn.Module, tuple[Any, ...]]:
    """A causal LM from a transformers config: random weights unless the folder has weights."""
    transformers = require("transformers")
    raw, folder = read_config(config_ref)
    model_type = raw.pop("model_type", None)
    if model_type is None:
        raise UserError(f"config '{config_ref}' has no model_type; it must be a transformers config")
    try:
        config = transformers.AutoConfig.for_model(model_type, **raw)
    except ValueError as e:
        raise UserError(f"transformers does not know model_type '{model_type}': {e}") from None
    # Eager attention by default: the softmax, masking and matmuls of attention are separate
    # ATen ops that kernforge can see and replace; SDPA hides them in one fused call.
    kwargs = {"attn_implementation": opts.attention}
    if folder is not None and _has_weights(folder):
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, **kwargs)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    model.config.use_cache = False  # prefill only: no KV cache to build and return
    ids = torch.randint(0, config.vocab_size, (opts.batch(1), opts.tokens(128)))
    return _LogitsOnly(model), (ids,)


class _LogitsOnly(nn.Module):
    """The logits of a causal LM, so that the forward returns a tensor, not a ModelOutput."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))


# ---------------------------------------------------------------- diffusers

def diffusers_model(config_ref: str, opts: ModelOptions) -> tuple[nn.Module, tuple[Any, ...]]:
    """A diffusers model from its config; AutoencoderKL is run as its decoder (latents -> image)."""
    diffusers = require("diffusers")
    raw, _ = read_config(config_ref)
    class_name = raw.get("_class_name")
    cls = getattr(diffusers, class_name or "", None)
    if cls is None:
        raise UserError(f"config '{config_ref}' names no diffusers class (_class_name={class_name!r})")
    if class_name != "AutoencoderKL":
        raise UserError(f"kernforge has no input recipe for diffusers' {class_name} yet; "
                        "AutoencoderKL (its decoder) is supported")
    vae = cls.from_config(raw)
    side = opts.side(128)
    latents = torch.randn(opts.batch(1), vae.config.latent_channels, side, side)
    return VaeDecoder(vae), (latents,)


class VaeDecoder(nn.Module):
    """The decoder half of a VAE: latents (B, C, h, w) -> image (B, 3, 8h, 8w)."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latents).sample
