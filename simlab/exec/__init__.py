"""The real executor: each lesson's algorithm written from scratch on `torch.distributed`.

Every engine talks on a process group it is given (`group=`, default WORLD) and keeps its tensors on
the device it is given (each rank's GPU under NCCL, the CPU under gloo): `collectives` (plans over
isend/irecv), `data_parallel` (DDP), `data_parallel_threads` (DP), `zero` + `zero_shards`, `pipeline`,
`tensor_parallel`; `mesh` builds the (pp, dp, tp) groups, `launch` starts the processes, `models`
holds the seeded models. Checking them against one process and torch's own is `simlab.parity`'s job.
"""
