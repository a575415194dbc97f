"""GPU-shape account: what a computation would ask of a GPU, counted on a CPU run.

A CPU timing hides the costs a GPU makes visible: every kernel launch (a few µs each, however
small its work), every host sync (the host waits for the queue to drain, the GPU then waits for the
host), every device→host copy (tens of GB/s at best, against TB/s on the device), and the memory
traffic of the element-wise and selection work beside the matrix products. This module runs the
computation on the CPU under two torch modes and counts, per call:

- `kernels`: aten ops that would launch a kernel (views, aliases and allocations excluded; an op is
  one kernel, a lower bound for the few ops that launch several, e.g. sort or topk);
- `syncs`: reads the host must wait for (`.item()`, `bool()`, `.tolist()`, `.numpy()`, `.cpu()`,
  nonzero, boolean indexing, unique, `torch.equal`, ...), by data-dependent op or transfer;
- `d2h` / `d2h_bytes` and `h2d` / `h2d_bytes`: transfers between host and device tensors;
- `other_bytes`: bytes read + written by the kernels outside the matrix products (each kernel's
  tensor arguments and results; the attention kernels count as matrix products);
- `matmul_flops`, `matmul_kernels`: the matrix products' work, for the projection.

Host or device: on the CPU every tensor lives on the same device, so the account tags them. A tensor
is a device tensor unless it is host-tagged: made by a factory call without `device=` (or with the
literal string "cpu"), moved with `.cpu()`, `.numpy()`, `.to("cpu")` (a string: `.to(dev)` with a
torch.device is read as "to the device"), passed in `host=`, or computed only from host tensors.
`.to(dev)` of a host tensor is a host→device copy. Moves return a copy (on a CPU run `.cpu()` would
return the tensor itself, which would then be both host and device).

On the meta device (weights and inputs built under `torch.device("meta")`) nothing is computed, so
the account of a full-size model in its GPU dtype takes seconds: device tensors are the meta ones,
host tensors the CPU ones, and a value the host reads from the device is made up (1 for a number,
True for a flag unless `flag=False` is passed, every element for a mask or a nonzero, zeros for a
copy to the host). The counts of code whose shapes follow such values (a boolean index, an early
return) are those of that guess: an upper bound for masks, a lower one where a read scalar sizes
later work. `flag=False` suits code whose flags are checks that hold (an `if bad: raise`).

The host's own tensor work (what runs on host tensors only) is no kernel; with `time_host=True` its
seconds on this CPU are summed in `host_compute_s` (measured, not projected), which the projection
adds as it is: work the host does between two syncs delays the device by as much.

    acc, out = account(fn, *args, host=[...])
    print(acc.line())
    print(projection_line(acc, base_acc, H200))  # benchmarks.account_projection
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from benchmarks.account_projection import Account

aten = torch.ops.aten

# matrix products and the fused attention kernels: their bytes are not "beside" the products
_SDPA = {
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_flash_attention_forward",
    "_efficient_attention_forward",
}
_MATMUL = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "vdot",
    "_addmm_activation",
    "convolution",
    "_convolution",
    "cudnn_convolution",
    "mkldnn_convolution",
    "linear",
    "_mkldnn_linear",
} | _SDPA
# ops that make the host wait for the device's result (data-dependent sizes or a value read)
_SYNC = {
    "_local_scalar_dense",
    "nonzero",
    "masked_select",
    "unique",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "equal",
    "is_nonzero",
    "bincount",
    "histc",
    "allclose",
}
# no kernel: allocation, aliasing and metadata
_NO_KERNEL = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "detach",
    "alias",
    "lift_fresh",
    "lift_fresh_copy",
    "resize_",
    "set_",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "_local_scalar_dense",
    "is_same_size",
    "result_type",
    "_has_compatible_shallow_copy_type",
    "_unsafe_view",
    "scalar_tensor",
}  # a CPU scalar operand
# factory functions: host tensors unless given a device
_FACTORIES = {
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "tensor",
    "as_tensor",
    "rand",
    "randn",
    "randint",
    "randperm",
    "eye",
    "from_numpy",
    "asarray",
    "empty_strided",
    "logspace",
}


def _nbytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches in `t`: its elements, but no more than its storage (a broadcast view
    reads its storage once)."""
    n = t.numel() * t.element_size()
    try:
        return min(n, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return n


_WRITE_AT = {
    "index_put_",
    "_index_put_impl_",
    "index_fill_",
    "index_add_",
    "scatter_",
    "scatter_add_",
    "scatter_reduce_",
    "index_copy_",
    "masked_scatter_",
}
_READ_AT = {"index", "gather", "index_select", "take", "embedding"}


def _moved(name: str, args, flat, outs) -> int:
    """Bytes a kernel reads and writes. Most read their arguments and write their results; an
    indexed write touches only the addressed elements of its target (read and written), an indexed
    read only the elements it returns; a radix select or sort passes over its input once per 8 bits
    of the element, plus once to gather."""
    if name in _WRITE_AT and flat:
        target = flat[0]
        rest = sum(_nbytes(t) for t in flat[1:])
        if name == "index_fill_":
            index = args[2]
            n = index.numel() * (target.numel() // max(target.shape[args[1]] if target.dim() else 1, 1))
        elif name in ("index_put_", "_index_put_impl_"):
            idx = [i for i in args[1] if isinstance(i, torch.Tensor)]
            lead = math.prod(target.shape[: len(args[1])]) if target.dim() else 1
            n = (torch.broadcast_shapes(*[i.shape for i in idx]).numel() if idx else 1) * (
                target.numel() // max(lead, 1)
            )
        else:
            n = max(t.numel() for t in flat[1:])
        return rest + 2 * n * target.element_size()
    if name in _READ_AT and outs:
        idx = sum(_nbytes(t) for t in flat if not t.is_floating_point() and t is not flat[0])
        return idx + 2 * sum(_nbytes(t) for t in outs)
    if name in ("topk", "sort", "kthvalue", "argsort") and flat:
        passes = flat[0].element_size() + 1
        return passes * _nbytes(flat[0]) + sum(_nbytes(t) for t in outs)
    return sum(_nbytes(t) for t in flat) + sum(_nbytes(t) for t in outs)


def _flops(name: str, args, out) -> int:
    t = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("mm", "bmm", "addmm", "baddbmm", "addbmm", "_addmm_activation"):
        a, b = (t[-2], t[-1])
        return 2 * a.numel() * b.shape[-1] * (b.shape[0] if name == "addbmm" else 1)
    if name in ("mv", "addmv", "dot", "vdot"):
        return 2 * t[-2].numel()
    if name in _SDPA:  # q (B, H, Lq, D), k (B, H, Lk, D): QKᵀ and PV
        q, k = t[0], t[1]
        return 4 * q.numel() * k.shape[-2]
    if "convolution" in name:
        w, o = t[1], out if isinstance(out, torch.Tensor) else out[0]
        return 2 * o.numel() * w[0].numel()
    if name in ("linear", "_mkldnn_linear"):
        return 2 * t[0].numel() * t[1].shape[0]
    return 0


class _Tracker:
    """Shared state of the two modes: the host tags and the counts."""

    def __init__(self, meta: bool = False, flag: bool = True, time_host: bool = False):
        self.meta, self.flag, self.time_host = meta, flag, time_host
        self.acc = Account()
        self.host = WeakIdKeyDictionary()
        self.host_scope = 0  # > 0 inside a host factory call or a transfer: its aten ops are not kernels

    def is_host(self, t) -> bool:
        if self.meta:
            return isinstance(t, torch.Tensor) and t.device.type != "meta"
        return isinstance(t, torch.Tensor) and t in self.host

    def tag(self, out, host: bool = True):
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                if host:
                    self.host[t] = True
                else:
                    self.host.pop(t, None)

    def sync(self, why: str, n: int = 1):
        self.acc.syncs += n
        self.acc.sync_ops[why] += n

    def d2h(self, t: torch.Tensor, why: str, blocking: bool = True):
        self.acc.d2h += 1
        self.acc.d2h_bytes += t.numel() * t.element_size()
        if blocking:
            self.sync(why)

    def h2d(self, t: torch.Tensor):
        self.acc.h2d += 1
        self.acc.h2d_bytes += t.numel() * t.element_size()


def _target(args, kwargs):
    """(device target, is it the host) of a `.to(...)` call; (None, None) for a dtype-only cast."""
    dev = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)) or isinstance(a, torch.Tensor):
            dev = a
            break
    if dev is None:
        return None, None
    if isinstance(dev, torch.Tensor):
        return dev, None  # decided by the other tensor's tag
    return dev, isinstance(dev, str) and dev.split(":")[0] == "cpu"


class _Functions(TorchFunctionMode):
    def __init__(self, tr: _Tracker):
        super().__init__()
        self.tr = tr

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tr = self.tr
        name = getattr(func, "__name__", "")
        is_method = isinstance(func, type(torch.Tensor.cpu)) or getattr(func, "__objclass__", None) is not None
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if not is_method and name in _FACTORIES and src is None:
            dev = kwargs.get("device")
            host = dev is None or (isinstance(dev, str) and dev.split(":")[0] == "cpu")
            if kwargs.get("pin_memory"):
                host = True
            tr.host_scope += host
            try:
                out = func(*args, **kwargs)
            finally:
                tr.host_scope -= host
            tr.tag(out, host)
            return out
        if src is not None and is_method and name in ("cpu", "to", "numpy", "tolist", "pin_memory", "cuda"):
            return self._move(func, name, src, args, kwargs)
        if name == "scaled_dot_product_attention" and tr.meta and src is not None and src.device.type == "meta":
            return self._attention(args, kwargs)
        return func(*args, **kwargs)

    def _attention(self, args, kwargs):
        """One fused attention kernel, as a GPU runs it (the meta device would decompose it into
        its math: matrices of scores a flash kernel never writes)."""
        q, k, v = args[:3]
        acc = self.tr.acc
        acc.kernels += 1
        acc.matmul_kernels += 1
        acc.ops["scaled_dot_product_attention"] += 1
        causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
        flops = 4 * q.numel() * k.shape[-2]  # QKᵀ and PV for every query head (grouped K/V included)
        flops = flops // 2 if causal else flops  # a causal kernel skips the masked half
        acc.matmul_flops += flops
        if q.dtype == torch.float32:
            acc.matmul_flops_fp32 += flops
        return torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)

    def _move(self, func, name, src, args, kwargs):
        tr = self.tr
        src_host = tr.is_host(src)
        if name == "to":
            dev, to_host = _target(args, kwargs)
            if dev is None:
                return func(*args, **kwargs)  # a dtype cast: an ordinary kernel
            if to_host is None:
                to_host = tr.is_host(dev)
            elif tr.meta:
                to_host = torch.device(dev).type != "meta"
        else:
            to_host = name != "cuda"
        if to_host == src_host:
            return func(*args, **kwargs)
        # a transfer: counted here, not as a kernel; the result is a copy so the tags stay apart
        tr.host_scope += 1
        try:
            if tr.meta and to_host:  # nothing to read on the meta device: zeros of its shape
                host = torch.zeros(src.shape, dtype=src.dtype)
                dtype = next((a for a in args[1:] if isinstance(a, torch.dtype)), kwargs.get("dtype"))
                out = {"tolist": host.tolist, "numpy": host.numpy}.get(name, lambda: host.to(dtype or host.dtype))()
            else:
                out = func(*args, **kwargs)
            if name not in ("tolist", "numpy") and isinstance(out, torch.Tensor) and out.data_ptr() == src.data_ptr():
                out = out.clone()
        finally:
            tr.host_scope -= 1
        if to_host:
            tr.d2h(src, f".{name}()", blocking=not kwargs.get("non_blocking", False))
        else:
            tr.h2d(src)
        if isinstance(out, torch.Tensor):
            tr.tag(out, to_host)
        return out


class _Aten(TorchDispatchMode):
    def __init__(self, tr: _Tracker):
        super().__init__()
        self.tr = tr

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tr, acc = self.tr, self.tr.acc
        name = func.overloadpacket.__name__
        flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if not tr.host_scope and flat and all(tr.is_host(t) for t in flat):
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            if tr.time_host:
                acc.host_compute_s += time.perf_counter() - t0
            tr.tag(out)  # host work: no kernel on the device
            return out
        out = _made_up(func, name, args, kwargs, tr.flag) if tr.meta else None
        if out is None:
            out = func(*args, **kwargs)
        if tr.host_scope:
            return out
        if name == "copy_" and len(flat) >= 2 and tr.is_host(args[0]) != tr.is_host(args[1]):
            if tr.is_host(args[0]):
                tr.d2h(
                    args[1],
                    "copy_ to host",
                    blocking=not kwargs.get("non_blocking", args[2] if len(args) > 2 else False),
                )
            else:
                tr.h2d(args[1])
            return out
        if name in _SYNC:
            tr.sync(name)
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_"):
            idx = args[1] if len(args) > 1 else kwargs.get("indices", [])
            if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in idx or []):
                tr.sync("boolean index")
        elif (
            name == "repeat_interleave"
            and kwargs.get("output_size") is None
            and len(args)
            and isinstance(args[-1], torch.Tensor)
        ):
            tr.sync(name)
        if name in _NO_KERNEL or func.is_view:
            return out
        acc.kernels += 1
        acc.ops[name] += 1
        if name in _MATMUL:
            acc.matmul_kernels += 1
            acc.matmul_flops += _flops(name, args, out)
            if any(t.dtype in (torch.float32, torch.float64) for t in flat[:2]):
                acc.matmul_flops_fp32 += _flops(name, args, out)
        else:
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            b = _moved(name, args, flat, outs)
            acc.other_bytes += b
            acc.op_bytes[name] += b
        return out


def _is_meta(args, kwargs) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in tree_flatten((args, kwargs))[0])


def _made_up(func, name: str, args, kwargs, flag: bool = True):
    """The result of a data-dependent op on meta tensors (see the module's docstring), or None
    where the op has a meta kernel of its own."""
    if not _is_meta(args, kwargs):
        return None
    x = args[0] if args else None
    if name == "_local_scalar_dense":
        return flag if x.dtype == torch.bool else (1.0 if x.is_floating_point() else 1)
    if name == "is_nonzero":
        return flag
    if name == "equal":
        return True
    if name == "nonzero":
        return torch.empty((x.numel(), x.dim()), dtype=torch.long, device="meta")
    if name == "masked_select":
        return torch.empty(torch.broadcast_shapes(x.shape, args[1].shape).numel(), dtype=x.dtype, device="meta")
    if name == "bincount":
        n = max(int(kwargs.get("minlength", args[2] if len(args) > 2 else 0)), 1)
        w = kwargs.get("weights", args[1] if len(args) > 1 else None)
        return torch.zeros(n, dtype=torch.double if w is not None else torch.long, device="meta")
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        idx = list(args[1])
        if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in idx):
            return None
        longs = []
        for i in idx:  # a mask over d dims stands for d index tensors naming all its elements
            if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                longs += [torch.empty(i.numel(), dtype=torch.long, device="meta")] * i.dim()
            else:
                longs.append(i)
        return func(args[0], longs, *args[2:], **kwargs)
    if name == "repeat_interleave" and isinstance(args[-1] if args else None, torch.Tensor):
        return None if kwargs.get("output_size") is not None else torch.empty(0, dtype=torch.long, device="meta")
    return None


def account(
    fn: Callable, *args, host: Iterable = (), meta: bool = False, flag: bool = True, time_host: bool = False, **kwargs
) -> tuple[Account, Any]:
    """Run `fn(*args, **kwargs)` on the CPU and count what it would ask of a GPU. Tensors in `host`
    (nested lists allowed) are host tensors; every other tensor that exists before the call (model
    weights, inputs) is a device tensor. With `meta=True` the device tensors are those on the meta
    device (see the module's docstring) and the host ones those on the CPU; `flag` is the value a
    flag read from a meta tensor is given. `time_host`: time the host's own tensor work."""
    tr = _Tracker(meta, flag, time_host)
    tr.tag(list(host))
    with _Functions(tr), _Aten(tr):
        out = fn(*args, **kwargs)
    return tr.acc, out
