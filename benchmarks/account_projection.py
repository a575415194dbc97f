"""What an account comes to: the counts of one computation (`Account`) and their projection onto a
GPU's roofline (`GPU`, `H200`, `project`). Apart from benchmarks.account, which fills the counts by
running code under torch's modes, so that reading and projecting them needs none of that machinery."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Account:
    kernels: int = 0
    matmul_kernels: int = 0
    syncs: int = 0
    d2h: int = 0
    d2h_bytes: int = 0
    h2d: int = 0
    h2d_bytes: int = 0
    other_bytes: int = 0
    matmul_flops: int = 0
    matmul_flops_fp32: int = 0  # the part in float32 (no tensor-core rate without TF32)
    host_compute_s: float = 0.0  # the host's own tensor work, timed on this CPU (time_host=True)
    ops: Counter = field(default_factory=Counter)  # kernels by aten op
    sync_ops: Counter = field(default_factory=Counter)  # syncs by cause
    op_bytes: Counter = field(default_factory=Counter)  # non-matmul bytes by aten op

    def scaled(self, f: float) -> "Account":
        """The account of `f` times the work (e.g. per-sample counts put at the paper's sample count)."""
        sc = lambda c: Counter({k: round(v * f) for k, v in c.items()})  # noqa: E731
        return Account(
            *(_times(getattr(self, k), f) for k in _FIELDS),
            ops=sc(self.ops),
            sync_ops=sc(self.sync_ops),
            op_bytes=sc(self.op_bytes),
        )

    def __add__(self, other: "Account") -> "Account":
        return Account(
            *(getattr(self, k) + getattr(other, k) for k in _FIELDS),
            ops=self.ops + other.ops,
            sync_ops=self.sync_ops + other.sync_ops,
            op_bytes=self.op_bytes + other.op_bytes,
        )

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _FIELDS}
        d["top_ops"] = dict(self.ops.most_common(8))
        d["top_op_bytes"] = dict(self.op_bytes.most_common(8))
        d["sync_ops"] = dict(self.sync_ops)
        return d

    def line(self) -> str:
        host = f", host tensor work {1e3 * self.host_compute_s:.1f} ms (this CPU)" if self.host_compute_s else ""
        return (
            f"kernels {self.kernels} ({self.matmul_kernels} matmul), syncs {self.syncs}, "
            f"D2H {self.d2h} ({_size(self.d2h_bytes)}), H2D {self.h2d} ({_size(self.h2d_bytes)}), "
            f"non-matmul traffic {_size(self.other_bytes)}, matmul {self.matmul_flops / 1e12:.3g} TFLOP{host}"
        )


_FIELDS = (
    "kernels",
    "matmul_kernels",
    "syncs",
    "d2h",
    "d2h_bytes",
    "h2d",
    "h2d_bytes",
    "other_bytes",
    "matmul_flops",
    "matmul_flops_fp32",
    "host_compute_s",
)


def _times(v, f: float):
    return v * f if isinstance(v, float) else round(v * f)


def _size(b: float) -> str:
    for unit, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= s:
            return f"{b / s:.3g} {unit}"
    return f"{int(b)} B"


# ----------------------------------------------------------------------------------- projection
@dataclass(frozen=True)
class GPU:
    """A roofline with launch floors: each kernel costs the device at least `launch_s` and the host
    `host_op_s` (Python, dispatch, launch; the two overlap until a sync); matrix products run at
    `flops` (achieved, not peak); the other kernels move their bytes at `bandwidth`; a sync adds
    `sync_s` (the queue drains and refills); a device→host copy moves at `d2h` (pageable memory)."""

    name: str
    flops: float
    bandwidth: float
    launch_s: float
    sync_s: float
    d2h: float
    host_op_s: float = 15e-6
    flops_fp32: float = 50e12


# achieved rates (bf16 dense products at ~60 % of peak, float32 ones without TF32 at ~75 % of theirs,
# ~75 % of HBM bandwidth, the 10.8 GB/s the masks' pageable copy reached on the H100 of 2026-11-22;
# kernel, host and sync floors of a busy stream)
H200 = GPU("NVIDIA H200 (projected)", flops=600e12, bandwidth=3.6e12, launch_s=5e-6, sync_s=30e-6, d2h=10.8e9)


def project(acc: Account, gpu: GPU = H200) -> dict:
    """Projected seconds on `gpu`, by part. The non-matmul kernels are bandwidth-bound or launch-bound,
    whichever is longer per kernel on average; the device's work is hidden behind the host's
    launches where those take longer (`host_s`)."""
    other = acc.kernels - acc.matmul_kernels
    mem = max(acc.other_bytes / gpu.bandwidth, other * gpu.launch_s)
    mm = (acc.matmul_flops - acc.matmul_flops_fp32) / gpu.flops + acc.matmul_flops_fp32 / gpu.flops_fp32
    parts = {"matmul_s": max(mm, acc.matmul_kernels * gpu.launch_s), "other_kernels_s": mem}
    parts["host_s"] = max(0.0, acc.kernels * gpu.host_op_s - parts["matmul_s"] - mem)
    parts.update(syncs_s=acc.syncs * gpu.sync_s, d2h_s=acc.d2h_bytes / gpu.d2h)
    if acc.host_compute_s:
        parts["host_compute_s"] = acc.host_compute_s
    parts["total_s"] = sum(parts.values())
    return parts


def projection_line(acc: Account, base: Account, gpu: GPU = H200) -> str:
    p, b = project(acc, gpu), project(base, gpu)
    parts = ", ".join(f"{k[:-2]} {1e3 * v:.1f} ms" for k, v in p.items() if k != "total_s")
    return (
        f"projection on {gpu.name}: {1e3 * p['total_s']:.1f} ms vs {1e3 * b['total_s']:.1f} ms, "
        f"ratio {p['total_s'] / b['total_s']:.2f} ({parts})"
    )
