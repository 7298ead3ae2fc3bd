"""The operators, one room each: ``flash_decode`` (decode attention), ``combine`` (the exact LSE merge of
context parallelism) and ``rotary_append`` (fused RoPE + KV-cache append). Each room holds its validation,
its plan and its program description (one `ttdecode.core.program_description.Program` for the host runtime and the device);
operators never import each other. ``cache_write`` holds what the cache-writing operators (``paged_update``,
``paged_fill``, ``rotary_append``) share."""
