"""A small Llama decoder on a mock mesh: the set-up the mesh tests' child scripts share (mock T3K
1 x 8 / 2 x 4, mock Galaxy 4 x 8; tests/mock/test_context_parallel_device.py,
tests/mock/test_llama_tp_cp_device.py, tools/galaxy_tp_cp.py).

* `tiny_llama`: a random Hugging Face Llama (seeded), 256-token vocabulary, heads of 32;
* `mesh_decoder`: opens the mock mesh with FABRIC_1D (or takes an open one), builds the decoder on it
  (``backend="device"``) inside `count_transfers` and hands over the decoder, the transfer log and
  the build's moves and host wall times;
* `record_host_rows`: keeps every step's device rows as a context parallel loop sends them.

Runs in the test's child process (the mock needs its environment before ``import ttnn``). Like
`ttdecode.testing.drivers`, nothing here imports the models: the decoder class comes in as an argument.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ttdecode.testing.mock import open_mock_mesh
from ttdecode.testing.transfers import TransferLog, count_transfers

__all__ = ["tiny_llama", "MeshDecoder", "mesh_decoder", "record_host_rows"]


def tiny_llama(heads: int = 4, kv_heads: int = 2, hidden: int = 128, layers: int = 2) -> LlamaForCausalLM:
    """A random Llama in eval mode (``torch.manual_seed(0)`` first): ``layers`` layers of ``heads``
    query and ``kv_heads`` KV heads of 32, hidden size ``hidden``, MLP width 256, vocabulary 256, RoPE
    theta 10000, up to 512 positions; no BOS / EOS / pad token."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=256, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=32,
                      max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-5, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(cfg).eval()


@dataclass
class MeshDecoder:
    """What `mesh_decoder` hands over: the mesh ``device``, the ``decoder``, the transfer ``log`` (cleared
    after the build), the build's moves (``build_moves``) and host wall times in seconds (``seconds``:
    "open", the mesh's opening, 0 when the mesh came in open; "build", the decoder's)."""

    device: Any
    decoder: Any
    log: TransferLog
    build_moves: list[str]
    seconds: dict[str, float] = field(default_factory=dict)


@contextmanager
def mesh_decoder(decoder_class: Any, shape: Sequence[int], *, devices: int, context_parallel: int,
                 heads: int = 4, kv_heads: int = 2, batch: int = 4, system: Optional[str] = None,
                 device: Any = None) -> Iterator[MeshDecoder]:
    """A `tiny_llama` (2 layers, ``heads`` / ``kv_heads``) as ``decoder_class.from_hf(..., batch=batch,
    max_seq_len=512, block_size=32, devices=devices, context_parallel=context_parallel,
    backend="device")`` on the mock mesh of ``shape`` (rows, columns), opened here with FABRIC_1D on
    ``system`` (default: the smallest mock system that holds ``shape``) unless ``device`` is an open
    mesh. The block's moves are counted in the yielded ``log`` (the transfer count ends with the block).
    The caller closes the decoder and the mesh (``ttnn.close_mesh_device``)."""
    hf = tiny_llama(heads=heads, kv_heads=kv_heads)
    seconds = {"open": 0.0}
    if device is None:
        t0 = time.perf_counter()
        device = open_mock_mesh(shape, system=system, fabric=True)
        seconds["open"] = time.perf_counter() - t0
    with count_transfers() as log:
        t0 = time.perf_counter()
        decoder = decoder_class.from_hf(hf, batch=batch, max_seq_len=512, block_size=32, devices=devices,
                                        context_parallel=context_parallel, backend="device", device=device)
        seconds["build"] = time.perf_counter() - t0
        build_moves = list(log.moves)
        log.clear()
        yield MeshDecoder(device, decoder, log, build_moves, seconds)


def record_host_rows(loop: Any) -> list[list[list[int]]]:
    """Wrap ``loop.host_rows`` (a ``ContextParallelDecode``'s) so that every step's int32 rows, one per
    device (``[devices, row width]``), are appended as lists to the returned list as they go out."""
    rows: list[list[list[int]]] = []
    host_rows = loop.host_rows

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        r = host_rows(*args, **kwargs)
        rows.append(r.tolist())
        return r

    loop.host_rows = recording
    return rows
