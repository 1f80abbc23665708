"""SINGA's ``device`` module: where tensors live.

``from singa_graph import device; dev = device.create_cpu_device()`` works as in SINGA. The
devices themselves are defined in :mod:`singa_graph.runtime.device`; this module only
re-exports SINGA's constructor names.
"""
from .runtime.device import (CpuDevice, CudaDevice, Device, create_cpu_device,  # noqa: F401
                             create_cuda_gpu, create_cuda_gpu_on, create_cuda_gpus,
                             get_default_device, parse)

__all__ = ["Device", "CpuDevice", "CudaDevice", "get_default_device", "create_cpu_device",
           "create_cuda_gpu", "create_cuda_gpu_on", "create_cuda_gpus", "parse"]
