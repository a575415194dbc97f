"""Pure torch/numpy implementations behind the workbench. Never imports gradio."""
