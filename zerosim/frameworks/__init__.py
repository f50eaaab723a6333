"""Fidelity to the frameworks zerosim models: their configuration files read as input, real torch run beside zerosim,
NCCL's own bytes compared with the ring. (The frameworks' arithmetic itself, their gradient recipes, lives with the
step that runs it: zerosim.parallel.data.recipes.)

    deepspeed/   a ds_config.json read into what zerosim runs, every key reported; sample configs
    torch/       the parity kit: DDP, ZeroRedundancyOptimizer and FSDP2 on gloo processes beside zerosim
    nccl/        verify-nccl: NCCL's collectives against the ring on GPUs
"""
