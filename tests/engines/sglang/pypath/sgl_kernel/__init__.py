"""Import stub for `sgl_kernel` (PyPI's `sglang-kernel`), which has no CPU
build on PyPI: its wheels are CUDA-only.

SGLang imports `sgl_kernel` (and submodules such as `sgl_kernel.kvcacheio`)
at module level in many files, also on the CPU path, so the import itself
must succeed. On this CPU path none of its functions are called:
`sglang/srt/utils/common.py::_is_intel_amx_backend_available` asks
`hasattr(torch.ops.sgl_kernel, "convert_weight_packed")`, which this stub
does not register, so `cpu_has_amx_support()` is False and the MoE layers
take the plain-torch path (`sglang/srt/layers/moe/fused_moe_native.py`)
instead of the AMX kernels of the CPU `sgl_kernel` build. Every name looked up
here is a function that raises, so a call that did reach the stub would fail
loudly instead of computing something else.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+pd-stitch-cpu-stub"
STUB = True


def _unavailable(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} called: this is pd-stitch's CPU import stub "
            "(tests/engines/sglang/pypath/sgl_kernel), which has no kernels"
        )

    fn.__name__ = name.rsplit(".", 1)[-1]
    fn.__qualname__ = name
    return fn


def _module_getattr(modname):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _unavailable(f"{modname}.{attr}" if modname else attr)

    return __getattr__


__getattr__ = _module_getattr("")


# Submodules left missing, so that SGLang's own fallback for a missing
# sgl_kernel runs: `sglang/srt/layers/quantization/utils.py::get_scalar_types`
# catches the ImportError and uses mock scalar types (the stub's functions
# would have no `.uint4b8`).
_MISSING = {"sgl_kernel.scalar_type"}


class _StubSubmodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any other `sgl_kernel.x.y` imports as an empty module whose names raise."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("sgl_kernel.") and fullname not in _MISSING:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name.split(".", 1)[1])
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_StubSubmodules())
