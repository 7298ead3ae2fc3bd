"""python -m ttdecode llama: a small random-weight Llama decoded through LlamaDecoder.generate.

Builds a Hugging Face LlamaForCausalLM from a preset (random weights, seeded; no download) or
loads a local checkpoint (--checkpoint DIR), decodes a random prompt greedily on the chosen
backend (default host: the FlashDecode kernels on the host runtime; the prompt in steps of up
to 32 tokens per user, a progress bar on stderr for prompts or generations over 64 tokens), and
prints the tokens, the host's tokens/s (wall time of generate, prompt steps included) and the
agreement with Hugging Face on the same run: relative L2 of every new token's logits against Hugging Face's full
forward of the produced sequence, argmax agreement, and whether Hugging Face's own greedy
generate gives the same tokens (random weights have near-tied logits, so a bf16 rounding can
flip a choice; the logits agreement is the measure).

Needs Hugging Face transformers and safetensors: pip install 'ttdecode[llama]' (without them the
command says so and exits 2). This text is the command's --help: plain text, no markup.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass
from typing import Any

#: The packages of the llama extra (pyproject.toml), which this command needs.
LLAMA_EXTRA = ("transformers", "safetensors")
#: LlamaDecoder's parameter names -> the flags of `llama` (errors name the flag).
LLAMA_FLAGS = {"devices": "--devices", "batch": "--batch", "kv_dtype": "--kv-dtype", "backend": "--backend",
               "path": "--checkpoint"}


@dataclass(frozen=True)
class TinyLlama:
    """A Llama preset of the CLI: q heads, kv heads, head_dim, layers, hidden, intermediate and vocab sizes."""

    description: str
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int


PRESETS = {
    "tiny": TinyLlama("8 q / 2 kv heads, head_dim 64, 2 layers", 8, 2, 64, 2, 256, 512, 512),
    "small": TinyLlama("16 q / 2 kv heads, head_dim 128, 4 layers", 16, 2, 128, 4, 512, 1024, 1024),
    "t3k-tiny": TinyLlama("16 q / 8 kv heads, head_dim 32, 2 layers (splits 8 ways)", 16, 8, 32, 2, 256, 512, 512),
}


def hf_model(preset: TinyLlama, seed: int) -> Any:
    """A random float32 Llama of ``preset`` (llama3 RoPE scaling, eager attention)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=preset.vocab, hidden_size=preset.hidden, intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers, num_attention_heads=preset.heads, num_key_value_heads=preset.kv_heads,
        head_dim=preset.head_dim, max_position_embeddings=4096, rope_theta=500000.0, initializer_range=0.05,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
        bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="eager",
    )
    return LlamaForCausalLM(cfg).eval()


def add_parser(sub: Any) -> None:
    """Register the ``llama`` subcommand on an argparse subparsers object."""
    p = sub.add_parser("llama", help="greedy decoding of a small random Llama through the FlashDecode op, vs Hugging Face",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                   help="; ".join(f"{k}: {v.description}" for k, v in PRESETS.items()) + " (default: tiny)")
    p.add_argument("--checkpoint", default=None, help="a local Hugging Face Llama directory instead of a preset (default: none, the preset)")
    p.add_argument("--devices", type=int, default=1, help="tensor-parallel devices: 1 N150, 2 N300, 8 T3K (default: 1)")
    p.add_argument("--backend", choices=("host", "reference"), default="host",
                   help="host: the FlashDecode kernels on the host runtime; reference: the float64 "
                        "reference (default: host)")
    p.add_argument("--batch", type=int, default=2, help="users decoded together (default: 2)")
    p.add_argument("--prompt-len", type=int, default=4, help="random prompt tokens per user (default: 4)")
    p.add_argument("--new-tokens", type=int, default=8, help="tokens generated per user (default: 8)")
    p.add_argument("--kv-dtype", choices=("bfloat16", "bfloat8_b"), default="bfloat8_b",
                   help="KV cache format (default: bfloat8_b)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the prompt (default: 0)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar (default: one on stderr for prompts or generations over 64 tokens)")
    p.set_defaults(func=cmd_llama, flags=LLAMA_FLAGS)


def missing_packages() -> list[str]:
    """The packages of the llama extra that are not installed (found without importing them)."""
    return [name for name in LLAMA_EXTRA if importlib.util.find_spec(name) is None]


def cmd_llama(args: argparse.Namespace) -> int:
    """Decode with `LlamaDecoder` and compare with Hugging Face; 2 (one line on stderr) without the llama extra."""
    missing = missing_packages()
    if missing:
        print(f"ttdecode llama: needs {' and '.join(missing)}, not installed: pip install 'ttdecode[llama]'",
              file=sys.stderr)
        return 2
    import torch

    from ttdecode.core.formats import DataType
    from ttdecode.models import LlamaDecoder

    for name in ("devices", "batch", "prompt_len"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: expected an int >= 1, got {getattr(args, name)}")
    if args.new_tokens < 1:
        raise ValueError(f"--new-tokens: expected an int >= 1, got {args.new_tokens}")
    if args.checkpoint:
        import json
        from pathlib import Path

        from transformers import LlamaForCausalLM

        cfg = Path(args.checkpoint) / "config.json"
        kind = json.loads(cfg.read_text()).get("model_type") if cfg.is_file() else None
        if kind != "llama":
            raise ValueError(f"--checkpoint: expected a Hugging Face Llama directory (config.json with model_type "
                             f"'llama'), got {args.checkpoint!r} (model_type {kind!r})")
        hf = LlamaForCausalLM.from_pretrained(args.checkpoint, local_files_only=True).float().eval()
        what = f"checkpoint {args.checkpoint}"
    else:
        hf = hf_model(PRESETS[args.preset], args.seed)
        what = f"preset {args.preset} ({PRESETS[args.preset].description}), random weights seed {args.seed}"
    vocab = hf.config.vocab_size
    prompt = torch.randint(0, vocab, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(args.seed))
    total = args.prompt_len + args.new_tokens
    max_seq = -(-total // 32) * 32
    print(f"llama: {what}; devices={args.devices} backend={args.backend} kv={args.kv_dtype} "
          f"batch={args.batch} prompt={args.prompt_len} new={args.new_tokens}")
    with LlamaDecoder.from_hf(hf, batch=args.batch, max_seq_len=max_seq, kv_dtype=DataType(args.kv_dtype),
                              devices=args.devices, backend=args.backend, block_size=32) as dec:
        t0 = time.perf_counter()
        ids, logits = dec.generate(prompt, args.new_tokens, return_logits=True,
                                   progress=None if args.progress else False)
        seconds = time.perf_counter() - t0
        prompt_steps, decode_steps = dec.generate_steps
    steps = prompt_steps + decode_steps
    tokens = args.batch * (args.prompt_len + args.new_tokens - 1)  # through the model
    for b in range(args.batch):
        print(f"user {b}: prompt {prompt[b].tolist()} -> {ids[b, args.prompt_len:].tolist()}")
    print(f"host: {seconds:.2f} s for {steps} steps of {args.batch} users ({prompt_steps} prompt steps of up to 32 "
          f"tokens, {decode_steps} decode steps) = {tokens / seconds:.1f} tokens/s "
          f"({seconds / steps * 1e3:.0f} ms per step, wall time on this machine)")
    with torch.no_grad():
        ref = hf(ids).logits[:, args.prompt_len - 1:-1].double()
        hf_ids = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                             do_sample=False, pad_token_id=0)
    rel = ((logits.double() - ref).norm(dim=-1) / ref.norm(dim=-1)).flatten()
    agree = (logits.argmax(-1) == ref.argmax(-1)).double().mean()
    same = bool(torch.equal(ids, hf_ids))
    print(f"vs Hugging Face: logits relative L2 max {float(rel.max()):.2e} mean {float(rel.mean()):.2e}; "
          f"argmax agreement {float(agree):.0%}; HF greedy generate gives the same tokens: {same}")
    return 0
