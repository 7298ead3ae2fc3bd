

FEATURES = {
    "window_40": dict(sliding_window_size=40),
    "window_17_tokens_3": dict(sliding_window_size=17, tokens=3),
    "tokens_4": dict(tokens=4),
    "sink": dict(sink=True),
    "mla": dict(mla=True),
    "mask": dict(mask=True),
}


@pytest.mark.parametrize("case", list(FEATURES))
def test_block16_bank_local_features_equal_the_reference(case: str) -> None:
    """Sliding windows (the entries before a window -1: a window's first tile whose first half holds no
    attended key is still owned by that entry's bank, read as an unsigned int, and its half is not read),
    several tokens, a sink, MLA and an attn_mask on a block-16 key_row pool (NaN padding): the reference."""
    c = FEATURES[case]
    tokens, window = c.get("tokens", 1), c.get("sliding_window_size")
    pos = [p for p in [-1, 0, 15, 16, 31, 32, 47, 48, 100, 175, 176, 191] if p < 0 or p >= tokens - 1]
    if c.get("mask"):
        pos = [191] * 3
    b, nh, nkv, s, d = len(pos), 8, 2, 192, 64
    dv = 32 if c.get("mla") else d
    gen = torch.Generator().manual_seed(len(case) + 70)
    q = randn_with_outliers((tokens, b, nh, d), gen)
    num_blocks = b * (s // BLOCK) + 1
    table = shuffled_table(b, s // BLOCK, num_blocks, seed=6)
    span = 0 if not window else window + tokens - 1
    reach = table.clone() if c.get("mask") else torch.full_like(table, -1)
    for u, p in enumerate(pos):
        if p >= 0 and not c.get("mask"):
            first = max(0, p - span + 1) if span else 0
            reach[u, first // BLOCK: p // BLOCK + 1] = table[u, first // BLOCK: p // BLOCK + 1]
    k = make_pool(gen, num_blocks, nkv, d, BFP8)
    v = None if c.get("mla") else make_pool(gen, num_blocks, nkv, dv, BFP8)
    common = dict(scale=1.0 / d ** 0.5, sliding_window_size=window, return_lse=True,
                  head_dim_v=dv if c.get("mla") else None)
    if c.get("sink"):
        common["attention_sink"] = torch.randn(nh, generator=gen)
    if c.get("mask"):
        mask = torch.where(torch.rand(b, 1, nh, s, generator=gen) < 0.3, -float("inf"), 0.0)
        mask[..., -1] = 0.0
        common.update(is_causal=False, attn_mask=mask)
    else:
        common["cur_pos"] = pos
    out, lse = paged_scaled_dot_product_attention_decode(q, k, v, reach, backend="host",
                                                         program_config=SDPAProgramConfig(kv_pages="key_row"),
                                                         **common)
    ref, ref_lse = paged_scaled_dot_product_attention_decode(q, k, v, reach, backend="reference", **common)
    for u, p in enumerate(pos):
        if p >= 0:
            check_close(out[:, u], ref[:, u], f"block 16 key_row {case}: user {u} (cur_pos {p})")
    check_lse(lse, ref_lse, f"block 16 key_row {case}: LSE")
