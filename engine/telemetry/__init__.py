"""What the machine says: NVML readers, the sampler thread and its ring buffers, environment, GPU specs."""
