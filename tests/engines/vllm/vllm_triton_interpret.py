"""Let vLLM 0.32's CPU build run Triton kernels in Triton's interpreter.

Loaded at interpreter start by `vllm_triton_interpret.pth` (one line,
`import vllm_triton_interpret`), which run.sh copies with this file into the
test venv's site-packages. It changes no vLLM file.

Why: `--enable-return-routed-experts` needs Model Runner V2, which needs
Triton. PyPI's Triton wheels have no CPU backend, so
`vllm/triton_utils/importing.py` logs "Triton is installed, but doesn't
include CPU backend. Disabling Triton." and sets `HAS_TRITON = False`, and
`vllm/config/vllm.py` then refuses V2 ("Model Runner V2 requires Triton.").
With `TRITON_INTERPRET=1` Triton runs a kernel's Python body on CPU tensors
(numpy underneath), so the kernels work, slowly, on tiny models. This hook
sets `HAS_TRITON = True` right after `vllm.triton_utils.importing` has run,
before `vllm.triton_utils` reads it.

It does nothing unless TRITON_INTERPRET=1 is set, so the venv's Python
behaves as usual otherwise.

On a CPU with AMX it also asks Linux for the AMX tile state (arch_prctl
ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which a process must ask for
before its first AMX instruction. vLLM's CPU attention takes its AMX path
for `bfloat16` and a block size of 32 (`_get_attn_isa` in
`vllm/v1/attention/backends/cpu_attn.py`) without asking; PyTorch asks
when its own AMX matmuls first run, which a long prompt's forward does
first. So a server whose first request was a short prompt died of SIGILL
in `cpu_attention_with_kv_cache` ("Fatal Python error: Illegal
instruction", seen on this project's machine once it ran on a host with
AMX), and one whose first prompt was long served everything after.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_TARGET = "vllm.triton_utils.importing"


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        module.HAS_TRITON = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


# x86-64 Linux: the arch_prctl system call, its request for a feature's
# permission, and the AMX tile data feature.
_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _ask_for_amx():
    try:
        with open("/proc/cpuinfo") as f:
            if " amx_tile" not in f.read():
                return
        import ctypes

        ctypes.CDLL(None, use_errno=True).syscall(
            _SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA
        )
    except (OSError, AttributeError):
        pass


if os.environ.get("TRITON_INTERPRET") == "1" and not any(
    isinstance(f, _Finder) for f in sys.meta_path
):
    sys.meta_path.insert(0, _Finder())
    _ask_for_amx()
