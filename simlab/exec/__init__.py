"""The real executor: the only part of simlab that imports torch.distributed."""
