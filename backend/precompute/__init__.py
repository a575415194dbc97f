"""Command-line jobs for the dataset-wide parts, sharded with accelerate (backend.core.precompute).

torchrun --nproc_per_node 2 -m backend.precompute.mathneuro --out DIR --cpu     # CPUs
accelerate launch --num_processes 8 -m backend.precompute.mathneuro --out DIR   # GPUs
"""
