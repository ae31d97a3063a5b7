"""Load a model from a spec.

Specs understood:
  path/to/file.py      KernelBench form: `Model`, `get_inputs()`, optional `get_init_inputs()`
  pkg.module:factory   a callable returning `(model, inputs)`; given the ModelOptions if it
                       takes an argument
  example:NAME         a model bundled with kernforge (kernforge/models/examples/NAME.py)
  torchvision:NAME     torchvision.models.get_model(NAME), random weights
  timm:NAME            timm.create_model(NAME), random weights
  hf:CONFIG            a transformers causal LM from a config (bundled name, config.json
                       or a folder; weights only if the folder has them)
  diffusers:CONFIG     a diffusers model from a config (AutoencoderKL: its decoder)
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kernforge.errors import UserError
from kernforge.models import zoo
from kernforge.models.options import ModelOptions
from kernforge.runtime.importing import FileImportError, import_path

EXAMPLES_DIR = Path(__file__).parent / "examples"
_ZOO = {"torchvision": zoo.torchvision_model, "timm": zoo.timm_model, "hf": zoo.hf_model,
        "diffusers": zoo.diffusers_model}


@dataclass
class LoadedModel:
    module: torch.nn.Module
    inputs: tuple[Any, ...]
    device: torch.device
    name: str
    spec: str


def resolve_device(device: str) -> torch.device:
    """'auto' picks the GPU when there is one; an explicit 'cuda' without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device '{device}'; use auto, cpu or cuda") from None


def bundled_examples() -> list[str]:
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.py") if not p.stem.startswith("_"))


def load_model(spec: str, device: torch.device, opts: ModelOptions | None = None) -> LoadedModel:
    opts = with_device_dtype(spec, device, opts or ModelOptions())
    module, inputs, name = _build(spec, opts)
    module = module.to(device).eval()
    inputs = tuple(_to_device(x, device) for x in inputs)
    if opts.torch_dtype is not None:
        module = module.to(opts.torch_dtype)
        inputs = tuple(_cast_floats(x, opts.torch_dtype) for x in inputs)
    return LoadedModel(module=module, inputs=inputs, device=device, name=name, spec=spec)


def with_device_dtype(spec: str, device: torch.device, opts: ModelOptions) -> ModelOptions:
    """The options with the dtype a bundled example declares for a GPU (GPU_DTYPE) where none
    was asked: its users run bf16 there, and a search on float32 tunes for a model nobody runs."""
    prefix, _, name = spec.partition(":")
    if opts.dtype is not None or device.type != "cuda" or prefix != "example" or not (EXAMPLES_DIR / f"{name}.py").is_file():
        return opts
    gpu_dtype = getattr(importlib.import_module(f"kernforge.models.examples.{name}"), "GPU_DTYPE", None)
    return replace(opts, dtype=gpu_dtype) if gpu_dtype else opts


def run_forward(loaded: LoadedModel) -> Any:
    """Run the model once; a forward that raises is the user's problem, said in one line."""
    try:
        with torch.no_grad():
            return loaded.module(*loaded.inputs)
    except Exception as e:  # noqa: BLE001 - any failure of user code becomes one line
        raise UserError(
            f"the model's forward raised {type(e).__name__}: {_first_line(e)}; "
            "fix the model or the inputs it is given"
        ) from None


# The model options each kind of spec reads (zoo.py; a bundled example says in its READS); dtype
# is read by all. A factory (pkg.module:factory) may read any, so it is not listed.
ZOO_READS = {"torchvision": ("batch_size", "resolution"), "timm": ("batch_size", "resolution"),
             "hf": ("batch_size", "seq_len", "attention"), "diffusers": ("batch_size", "resolution")}
SPEC_OPTIONS = ("batch_size", "seq_len", "resolution", "scale", "attention")


def options_read(spec: str) -> tuple[str, ...] | None:
    """The model options a spec reads; None where it cannot be told (a factory, an unknown example)."""
    prefix, _, rest = spec.partition(":")
    if prefix == "example":
        if not (EXAMPLES_DIR / f"{rest}.py").is_file():
            return None
        return tuple(getattr(importlib.import_module(f"kernforge.models.examples.{rest}"), "READS", ()))
    if spec.endswith(".py") or Path(spec).exists():
        return ()
    return ZOO_READS.get(prefix)


def _build(spec: str, opts: ModelOptions) -> tuple[torch.nn.Module, tuple[Any, ...], str]:
    prefix, _, rest = spec.partition(":")
    if prefix == "example":
        return _from_example(rest, opts)
    if spec.endswith(".py") or Path(spec).exists():
        return _from_kernelbench_file(Path(spec))
    if prefix in _ZOO:
        model, inputs = _ZOO[prefix](rest, opts)
        return model, inputs, Path(rest).stem or rest
    if ":" in spec:
        return _from_factory(spec, opts)
    raise UserError(
        f"cannot read model spec '{spec}'; give a .py file (KernelBench form), "
        "pkg.module:factory, or example:NAME"
    )


def _from_example(name: str, opts: ModelOptions) -> tuple[torch.nn.Module, tuple[Any, ...], str]:
    path = EXAMPLES_DIR / f"{name}.py"
    if not path.is_file():
        raise UserError(f"no bundled example '{name}'; choose one of: {', '.join(bundled_examples())}")
    module = importlib.import_module(f"kernforge.models.examples.{name}")
    if hasattr(module, "build"):
        model, inputs = module.build(opts)
        return model, tuple(inputs), name
    return _from_kernelbench_file(path)


def _from_kernelbench_file(path: Path) -> tuple[torch.nn.Module, tuple[Any, ...], str]:
    if not path.is_file():
        raise UserError(f"model file '{path}' not found; give the path to a .py file")
    mod = _import_file(path)
    if not hasattr(mod, "Model"):
        raise UserError(
            f"'{path}' has no class Model; a KernelBench-form file defines Model, "
            "get_inputs() and get_init_inputs()"
        )
    if not callable(getattr(mod, "get_inputs", None)):
        raise UserError(f"'{path}' has no get_inputs(); it must return the forward's inputs")
    init_inputs = _call_user(mod.get_init_inputs, path) if hasattr(mod, "get_init_inputs") else []
    try:
        model = mod.Model(*init_inputs)
    except Exception as e:  # noqa: BLE001
        raise UserError(
            f"Model(*get_init_inputs()) in '{path}' raised {type(e).__name__}: {_first_line(e)}"
        ) from None
    inputs = _call_user(mod.get_inputs, path)
    return model, tuple(inputs), path.stem


def _from_factory(spec: str, opts: ModelOptions) -> tuple[torch.nn.Module, tuple[Any, ...], str]:
    mod_name, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise UserError(f"cannot import '{mod_name}' ({_first_line(e)}); is it on PYTHONPATH?") from None
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise UserError(f"'{mod_name}' has no callable '{attr}'; the factory returns (model, inputs)")
    takes_options = bool(inspect.signature(factory).parameters)
    result = _call_user(lambda: factory(opts) if takes_options else factory(), spec, attr)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise UserError(f"'{spec}' must return (model, inputs), with model an nn.Module")
    model, inputs = result
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    return model, inputs, attr


def _import_file(path: Path) -> Any:
    try:
        return import_path(path, "kernforge_user_model")
    except FileImportError as e:
        raise UserError(str(e)) from None


def _call_user(fn: Any, where: Any, name: str | None = None) -> Any:
    try:
        return fn()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001
        raise UserError(f"{name or fn.__name__}() in '{where}' raised {type(e).__name__}: "
                        f"{_first_line(e)}") from None


def _to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def _cast_floats(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_floats(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _cast_floats(v, dtype) for k, v in x.items()}
    return x


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"
