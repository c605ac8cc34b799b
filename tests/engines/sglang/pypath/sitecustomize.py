"""Patches SGLang 0.5.23 after import so that its P/D path runs on a CPU
without an NVIDIA driver. Python imports this file at start-up because
tests/engines/sglang/pypath is on PYTHONPATH (run.sh sets it for the servers,
and SGLang's scheduler processes inherit it). No SGLang file is changed: a
meta-path finder wraps the loader of the two modules below and patches each
right after its code has run, in every process that imports it.

1. `sglang.srt.mem_cache.pool_host.common.ALLOC_MEMORY_FUNCS["cpu"]`.
   The routed-experts host buffer (`sglang/srt/state_capturer/base.py`,
   `BaseHostCache.__init__`: `alloc = ALLOC_MEMORY_FUNCS[device]`, called
   with `pin_memory=True`) is allocated by the dict's default,
   `alloc_with_host_register`, which registers the pages with CUDA
   (`_cuda_host_register`, `cudaHostRegister`): on this machine that fails
   with "Found no NVIDIA driver". Pinning only matters for copies from a GPU;
   here the buffer is plain memory from the same `HostTensorAllocator`
   (`alloc_mmap`), zeroed by the caller as before.

2. `sglang.srt.disaggregation.mooncake.conn.MooncakeKVSender.supports_host_tensor_indices`.
   With it True, the prefill's KV send (`sglang/srt/disaggregation/prefill.py`,
   `send_kv_chunk`: `if getattr(sender, "supports_host_tensor_indices", False)`)
   copies the page indices into a pinned tensor (`pin_memory=True`) and records
   a `torch.cuda.Event()`, both of which need CUDA. False takes the branch every
   other transfer backend takes (`kv_to_page_indices(kv_indices, page_size)`).
"""

import importlib.abc
import importlib.util
import sys


def _plain_host_alloc(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
    # Replaces alloc_with_host_register for device "cpu": the same allocation,
    # without cudaHostRegister.
    return allocator.allocate(dims, dtype=dtype, device=device)


def _patch_pool_host_common(module):
    module.ALLOC_MEMORY_FUNCS["cpu"] = _plain_host_alloc


def _patch_mooncake_conn(module):
    module.MooncakeKVSender.supports_host_tensor_indices = False


_PATCHES = {
    "sglang.srt.mem_cache.pool_host.common": _patch_pool_host_common,
    "sglang.srt.disaggregation.mooncake.conn": _patch_mooncake_conn,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, patch):
        self.inner = inner
        self.patch = patch

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.patch(module)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        # Find the real module with the other finders, then wrap its loader.
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
