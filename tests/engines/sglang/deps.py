"""SGLang's Requires-Dist, read from its wheel's METADATA, less what needs an
NVIDIA GPU: prints the requirements to install on this (CPU) machine, one a
line; with --dropped, the ones left out.

    python deps.py [--dropped] sglang-0.5.23-....whl
"""
import sys
import zipfile

from packaging.requirements import Requirement

# Kernels and libraries built for CUDA GPUs only: no CPU wheels, or wheels
# whose import needs a driver. The CPU path of SGLang does not import them
# (sgl_kernel, which it does import, is replaced by the stub in pypath/).
GPU_ONLY = {
    "sglang-kernel", "sgl-kernel", "flashinfer-python", "flash-attn-4",
    "sgl-deep-gemm", "sgl-deep-ep", "sgl-flash-mla", "humming-kernels",
    "nvidia-cutlass-dsl", "nvidia-mathdx", "nvshmem4py-cu13", "quack-kernels",
    "tilelang", "torch-memory-saver",
}


def canonical(name):
    return name.lower().replace("_", "-").replace(".", "-")


def main(argv):
    dropped = "--dropped" in argv
    wheel = [a for a in argv if not a.startswith("--")][0]
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra, or another platform
        gpu = canonical(req.name) in GPU_ONLY
        if gpu == dropped:
            print(str(req) if not dropped else req.name)


if __name__ == "__main__":
    main(sys.argv[1:])
