"""torchvision classification models with random weights, exported to ONNX.

Shared by bench/onnx_models.py and tests/onnx/test_torchvision_models.py. Every model is
built in eval mode with random weights. Parameters that torchvision initialises to one
constant (zero biases, unit norm scales, the ViT's zero head, which would make every output
0) get random values, and BatchNorm running statistics get a spread (a fresh BatchNorm has
mean 0 and variance 1, which would hide a wrong use of the statistics). Export is ``torch.onnx.export`` at opset 17 with a symbolic
batch dimension, through the TorchScript exporter (``dynamo=False``): the dynamo exporter,
the default since torch 2.9, needs onnxscript and writes a different op mix for the same
model.

torchvision 0.28 is installed with ``--no-deps`` next to a CPU torch 2.13 (its own
dependencies would pull a CUDA torch); its compiled ops (``torchvision::nms`` ...) do not
load against that build, and none of the classification models needs them, so
:func:`import_torchvision` makes ``torch.library.register_fake`` a no-op while it imports.
"""
from __future__ import annotations

import os
import warnings

IMAGE = 64  # input height and width of every model
# bump when a builder or the weight randomisation changes: cached exports are then rebuilt
RECIPE = 1


def _vit(tv):
    return tv.models.VisionTransformer(image_size=IMAGE, patch_size=8, num_layers=2,
                                       num_heads=4, hidden_dim=64, mlp_dim=128,
                                       num_classes=100)


def _swin(tv):
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], num_classes=100)


# name -> builder(torchvision) -> nn.Module
MODELS = {
    "resnet18": lambda tv: tv.models.resnet18(),
    "mobilenet_v2": lambda tv: tv.models.mobilenet_v2(),
    "mobilenet_v3_small": lambda tv: tv.models.mobilenet_v3_small(),
    "squeezenet1_1": lambda tv: tv.models.squeezenet1_1(),
    "shufflenet_v2_x0_5": lambda tv: tv.models.shufflenet_v2_x0_5(),
    "efficientnet_b0": lambda tv: tv.models.efficientnet_b0(),
    "densenet121": lambda tv: tv.models.densenet121(),
    "googlenet": lambda tv: tv.models.googlenet(aux_logits=False, init_weights=True),
    "mnasnet0_5": lambda tv: tv.models.mnasnet0_5(),
    "regnet_y_400mf": lambda tv: tv.models.regnet_y_400mf(),
    "convnext_tiny": lambda tv: tv.models.convnext_tiny(),
    "vit_small": _vit,
    "swin_small": _swin,
}


def image_size(name: str) -> int:
    """The input height and width the bench uses for ``name``."""
    return IMAGE


def import_torchvision():
    """``import torchvision`` with ``torch.library.register_fake`` a no-op meanwhile."""
    import torch

    saved = torch.library.register_fake
    torch.library.register_fake = lambda *a, **k: (lambda f: f)
    try:
        import torchvision
    finally:
        torch.library.register_fake = saved
    return torchvision


def build(name: str, seed: int = 0, image: int = IMAGE):
    """The model ``name`` in eval mode, random weights and BatchNorm statistics from ``seed``.

    ``image`` changes the input size of the ViT (the others take any size)."""
    import torch

    tv = import_torchvision()
    torch.manual_seed(seed)
    if name == "vit_small" and image != IMAGE:
        m = tv.models.VisionTransformer(image_size=image, patch_size=8, num_layers=2,
                                        num_heads=4, hidden_dim=64, mlp_dim=128,
                                        num_classes=100)
    else:
        m = MODELS[name](tv)
    return randomise(m, seed + 1)


def randomise(m, seed: int = 1):
    """``m`` in eval mode with no parameter left at one constant (zero biases, unit scales
    get a little noise) and BatchNorm statistics and affine terms with a spread."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.numel() == 1 or bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
        for mod in m.modules():
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                mod.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
                mod.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return m.eval()


def export(model, path: str, image: int = IMAGE, batch: int = 2,
           keep_batchnorm: bool = False, input_shape=None) -> str:
    """Write ``model`` to ``path`` as ONNX (opset 17, symbolic batch); returns ``path``.

    By default the file is what a user exporting for inference gets: the exporter folds
    each BatchNorm into the convolution before it. ``keep_batchnorm`` keeps the
    BatchNormalization nodes (``TrainingMode.PRESERVE`` on an eval-mode model), so that
    training the imported model trains the same function as the torch model in train mode.
    ``input_shape`` (batch first) replaces the default ``(batch, 3, image, image)``.
    """
    import torch

    x = torch.randn(*(input_shape or (batch, 3, image, image)))
    mode = torch.onnx.TrainingMode.PRESERVE if keep_batchnorm else torch.onnx.TrainingMode.EVAL
    tmp = f"{path}.{os.getpid()}.tmp"
    with warnings.catch_warnings():  # tracer warnings about shape arithmetic in Python
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp, opset_version=17, dynamo=False, training=mode,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    os.replace(tmp, path)  # a cache never holds a half-written file
    return path


def cached_export(name: str, cache_dir: str, image: int = IMAGE,
                  keep_batchnorm: bool = False) -> str:
    """The ONNX file of ``name`` in ``cache_dir``, exported on first use."""
    import torch

    os.makedirs(cache_dir, exist_ok=True)
    tag = (f"{'bn_' if keep_batchnorm else ''}r{RECIPE}_torch{torch.__version__}"
           f"_tv{import_torchvision().__version__}")
    path = os.path.join(cache_dir, f"{name}_{image}_opset17_{tag}.onnx")
    if not os.path.exists(path):
        export(build(name, image=image), path, image=image, keep_batchnorm=keep_batchnorm)
    return path
