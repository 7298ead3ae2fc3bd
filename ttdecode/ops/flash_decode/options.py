"""The options of one decode call: `DecodeOptions`, built once from the public keywords.

The public functions (``ttdecode.api``, ``ttdecode.patch``, ``ttdecode.distributed.context``) keep ttnn's
keyword signatures; each builds one `DecodeOptions` from its keywords and passes that object down:
validation (``validate.validate_decode``), the backend's run and the device step
(``device_step.FlashDecodeStep``) read their options from it, never from a keyword list of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["DecodeOptions"]


@dataclass(slots=True, kw_only=True)
class DecodeOptions:
    """Everything of a decode call but Q, K and V, as given (checked by ``validate.validate_decode``).

    Shapes and meanings as in ``ttdecode.api.scaled_dot_product_attention_decode`` (``B`` users, ``NH``
    q heads, ``S`` cache positions, ``Dv`` V's head dim). The object is read, never changed: a variant
    is made with `replace` (slots and no freezing keep its construction cheap; a cached device call
    builds one per token).

    Attributes:
        paged: K/V are a block pool ``[num_blocks, NKV, block_size, D]`` read through ``page_table``.
        page_table: int32 ``[B, max_blocks]`` (paged only).
        is_causal: attend ``0..cur_pos[b]`` (True) or all S positions (False).
        attn_mask: non-causal only, additive ``[B or 1, 1, NH, S]``.
        cur_pos / cur_pos_tensor: causal only, exactly one: B positions (a list, or an int32 ``[B]``
            tensor); an empty list means none given.
        attention_sink: ``[NH]`` or ``[NH, 32]`` per-head sink logits.
        scale: None (``1/sqrt(D)``) or the score scale. sliding_window_size: None or W key positions.
        share_cache: every user reads KV batch 0 (None means False).
        program_config / compute_kernel_config: ``ttdecode.config`` or ttnn configs (None: defaults).
        memory_config: the output's placement (None: interleaved DRAM).
        head_dim_v: Dv with ``v=None`` (MLA), else None or V's last dim.
        return_lse: also return the LSE ``[T, B, NH]``.
        backend: "auto", "device", "host" or "reference".
        validate_values: read device-resident positions / page tables back and check them.
    """

    paged: bool = False
    page_table: Any = None
    is_causal: Any = True
    attn_mask: Any = None
    cur_pos: Any = None
    cur_pos_tensor: Any = None
    attention_sink: Any = None
    scale: Optional[float] = None
    sliding_window_size: Optional[int] = None
    share_cache: Any = False
    program_config: Any = None
    compute_kernel_config: Any = None
    memory_config: Any = None
    head_dim_v: Optional[int] = None
    return_lse: Any = False
    backend: str = "auto"
    validate_values: Any = False

    def replace(self, **changes: Any) -> "DecodeOptions":
        """A copy with `changes` (field name -> value); this object stays as it is."""
        return dataclasses.replace(self, **changes)
