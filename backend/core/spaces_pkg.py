"""Hugging Face's `spaces` package (ZeroGPU), imported once, here: present on a ZeroGPU Space, None
elsewhere. Below both the model store (whose default budget must not query CUDA under ZeroGPU) and the
GPU shim that wraps functions with it (backend.core.zerogpu), which builds on the store."""

try:  # pragma: no cover - only present on Spaces
    import spaces
except Exception:  # ImportError, or spaces failing outside a Space
    spaces = None


def available() -> bool:
    return spaces is not None
