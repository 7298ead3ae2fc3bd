"""Testing support: a mock Wormhole through the real ttnn (`ttdecode.testing.mock`) and dry runs of
programs through `ttnn.generic_op` on it (`ttdecode.testing.dry_run`); counts of ttnn's host <-> device
moves and of a function's calls (`ttdecode.testing.transfers`); the drivers the mock tests share
(`ttdecode.testing.drivers`: a decoder's join/leave decode loop, a decode call's inputs); a small
Llama decoder set up on a mock mesh (`ttdecode.testing.mesh_llama`); our kernels' JIT builds compiled
again with GCC 12 (`ttdecode.testing.gcc_front_end`).

Imports only the package's shared modules (program, formats, ttnn_env, paths) and the generic
device backend (`ttdecode.ttnn_backend`); nothing operator-specific.
"""
