"""Tests of the real executor (torch.distributed on gloo)."""
