"""Network hygiene switches, applied before gradio / huggingface_hub are imported.

Set in code (not only in docs) so that no launch path phones home: Gradio's analytics, the hub
client's telemetry, and — unless a hub preset is chosen — any hub access at all.
"""

import os


def apply(offline: bool = True) -> None:
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ.setdefault("GRADIO_SERVER_NAME", "127.0.0.1")
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
