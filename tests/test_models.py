"""kernforge.models: every spec form loads; every user mistake is one clear UserError."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import TINY_MODEL

from kernforge.errors import UserError
from kernforge.models import bundled_examples, load_model, resolve_device, run_forward

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")


# ---------------------------------------------------------------- KernelBench files

def test_kernelbench_file_loads():
    loaded = load_model(str(TINY_MODEL), CPU)
    assert isinstance(loaded.module, torch.nn.Module)
    assert not loaded.module.training  # put in eval mode
    assert loaded.name == "tiny_softmax"
    assert loaded.spec == str(TINY_MODEL)
    assert loaded.device == CPU
    assert isinstance(loaded.inputs, tuple) and len(loaded.inputs) == 1
    assert loaded.inputs[0].shape == (2, 40, 48)
    out = run_forward(loaded)
    assert out.shape == (2, 40, 48)


def test_kernelbench_file_uses_get_init_inputs(write_model):
    path = write_model("with_init", """
        import torch

        class Model(torch.nn.Module):
            def __init__(self, dim, scale):
                super().__init__()
                self.dim, self.scale = dim, scale

            def forward(self, x):
                return x * self.scale

        def get_inputs():
            return [torch.ones(2, 3)]

        def get_init_inputs():
            return [3, 5.0]
    """)
    loaded = load_model(str(path), CPU)
    assert (loaded.module.dim, loaded.module.scale) == (3, 5.0)
    assert torch.equal(run_forward(loaded), torch.full((2, 3), 5.0))


def test_kernelbench_file_without_get_init_inputs_builds_model_without_args(write_model):
    path = write_model("no_init", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return x + 1

        def get_inputs():
            return [torch.zeros(4)]
    """)
    loaded = load_model(str(path), CPU)
    assert torch.equal(run_forward(loaded), torch.ones(4))


# ---------------------------------------------------------------- pkg.module:factory

FACTORY_MODULE = """
    import torch

    class Doubler(torch.nn.Module):
        def forward(self, x, y):
            return 2 * x + y

    def build():
        return Doubler(), [torch.ones(3), torch.arange(3.0)]

    def build_single():
        return Doubler(), torch.ones(3)

    def build_wrong():
        return "not a model"

    def build_raises():
        raise RuntimeError("no weights here")

    NOT_CALLABLE = 3
"""


@pytest.fixture
def factory_module(write_model, monkeypatch, tmp_path):
    name = f"kf_test_factory_{abs(hash(str(tmp_path)))}"
    write_model(name, FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_factory_spec_loads(factory_module):
    loaded = load_model(f"{factory_module}:build", CPU)
    assert type(loaded.module).__name__ == "Doubler"
    assert loaded.name == "build"
    assert len(loaded.inputs) == 2
    assert torch.equal(run_forward(loaded), torch.tensor([2.0, 3.0, 4.0]))


def test_factory_single_input_becomes_a_tuple(factory_module):
    loaded = load_model(f"{factory_module}:build_single", CPU)
    assert isinstance(loaded.inputs, tuple) and len(loaded.inputs) == 1
    assert torch.equal(loaded.inputs[0], torch.ones(3))


@pytest.mark.parametrize("attr, words", [
    ("build_wrong", "must return (model, inputs)"),
    ("build_raises", "build_raises() in"),
    ("NOT_CALLABLE", "has no callable 'NOT_CALLABLE'"),
    ("missing", "has no callable 'missing'"),
])
def test_factory_mistakes_are_user_errors(factory_module, attr, words):
    with pytest.raises(UserError) as info:
        load_model(f"{factory_module}:{attr}", CPU)
    assert words in str(info.value)


def test_factory_module_not_importable():
    with pytest.raises(UserError, match="cannot import 'kf_no_such_module_xyz'"):
        load_model("kf_no_such_module_xyz:build", CPU)


# ---------------------------------------------------------------- bundled examples

def test_attention_example_exists_and_loads():
    assert "attention" in bundled_examples()
    loaded = load_model("example:attention", CPU)
    assert loaded.name == "attention"
    assert isinstance(loaded.module, torch.nn.Module)
    (x,) = loaded.inputs
    assert x.shape == (4, 512, 256)


def test_unknown_example_lists_the_bundled_ones():
    with pytest.raises(UserError) as info:
        load_model("example:nosuch", CPU)
    message = str(info.value)
    assert "no bundled example 'nosuch'" in message
    assert "attention" in message


# ---------------------------------------------------------------- user errors

def test_missing_file():
    with pytest.raises(UserError, match="not found"):
        load_model("does/not/exist.py", CPU)


def test_file_without_model(write_model):
    path = write_model("no_model", """
        import torch

        def get_inputs():
            return [torch.ones(1)]
    """)
    with pytest.raises(UserError, match="has no class Model"):
        load_model(str(path), CPU)


def test_file_without_get_inputs(write_model):
    path = write_model("no_inputs", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return x
    """)
    with pytest.raises(UserError, match=r"has no get_inputs\(\)"):
        load_model(str(path), CPU)


def test_get_inputs_raising(write_model):
    path = write_model("bad_inputs", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return x

        def get_inputs():
            raise ValueError("cannot make inputs")
    """)
    with pytest.raises(UserError) as info:
        load_model(str(path), CPU)
    message = str(info.value)
    assert "get_inputs()" in message
    assert "ValueError: cannot make inputs" in message


def test_model_constructor_raising(write_model):
    path = write_model("bad_init", """
        import torch

        class Model(torch.nn.Module):
            def __init__(self, dim):
                raise TypeError("bad dim")

        def get_inputs():
            return [torch.ones(1)]

        def get_init_inputs():
            return [1]
    """)
    with pytest.raises(UserError, match="TypeError: bad dim"):
        load_model(str(path), CPU)


def test_file_that_fails_to_import(write_model):
    path = write_model("bad_import", """
        import kf_this_module_does_not_exist
    """)
    with pytest.raises(UserError, match="importing .* raised ModuleNotFoundError"):
        load_model(str(path), CPU)


def test_forward_raising_is_one_line(write_model):
    path = write_model("bad_forward", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                raise ValueError("boom\\nsecond line of the message")

        def get_inputs():
            return [torch.ones(3)]
    """)
    loaded = load_model(str(path), CPU)  # loading alone does not run forward
    with pytest.raises(UserError) as info:
        run_forward(loaded)
    message = str(info.value)
    assert "forward raised ValueError: boom" in message
    assert "\n" not in message and "second line" not in message


def test_forward_shape_mismatch_is_a_user_error(write_model):
    path = write_model("shape_mismatch", """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return x @ torch.ones(5, 5)

        def get_inputs():
            return [torch.ones(3, 4)]
    """)
    with pytest.raises(UserError, match="forward raised RuntimeError"):
        run_forward(load_model(str(path), CPU))


@pytest.mark.parametrize(("spec", "message"), [
    ("torchvision:nosuchnet", "torchvision has no model 'nosuchnet'"),
    ("timm:nosuchnet", "timm cannot build 'nosuchnet'"),
    ("hf:bert-base-uncased", "no config 'bert-base-uncased'"),  # nothing is downloaded
    ("diffusers:nosuchconfig", "no config 'nosuchconfig'"),
])
def test_unknown_zoo_models_are_one_line_errors(spec, message):
    with pytest.raises(UserError, match=message):
        load_model(spec, CPU)


def test_unreadable_spec():
    with pytest.raises(UserError, match="cannot read model spec 'just_a_name'"):
        load_model("just_a_name", CPU)


# ---------------------------------------------------------------- devices

def test_resolve_device():
    assert resolve_device("cpu") == CPU
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(UserError, match="unknown device 'potato'"):
        resolve_device("potato")


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the message given when no GPU is visible")
def test_cuda_without_gpu_is_a_user_error():
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        resolve_device("cuda")


# ---------------------------------------------------------------- dtypes

def test_bundled_language_models_and_vae_default_to_bf16_on_a_gpu_only():
    from kernforge.models.loader import with_device_dtype
    from kernforge.models.options import ModelOptions

    gpu = torch.device("cuda")
    for name in ("gemma_decoder", "qwen_moe", "sd35_vae_decoder"):
        assert with_device_dtype(f"example:{name}", gpu, ModelOptions()).dtype == "bf16"
        assert with_device_dtype(f"example:{name}", CPU, ModelOptions()).dtype is None
        assert with_device_dtype(f"example:{name}", gpu, ModelOptions(dtype="fp32")).dtype == "fp32"
    assert with_device_dtype("example:resnet50", gpu, ModelOptions()).dtype is None  # its users run fp32
    assert with_device_dtype(str(TINY_MODEL), gpu, ModelOptions()).dtype is None
