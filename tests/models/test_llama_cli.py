"""``python -m ttdecode llama``: the run prints the tokens, the host speed and the HF agreement."""

from __future__ import annotations

import re

from ttdecode.__main__ import main


def test_llama_cli_generates_and_reports_hf_agreement(capsys):
    assert main(["llama", "--backend", "reference", "--batch", "1", "--new-tokens", "3", "--kv-dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"user 0: prompt \[(\d+, ){3}\d+\] -> \[\d+, \d+, \d+\]", out)
    assert re.search(r"host: .* tokens/s", out)
    m = re.search(r"logits relative L2 max ([0-9.e+-]+) .*argmax agreement (\d+)%", out)
    assert m and float(m.group(1)) <= 5e-2 and int(m.group(2)) == 100


def test_llama_cli_refuses_bad_counts(capsys):
    assert main(["llama", "--new-tokens", "0"]) == 2
    assert "--new-tokens: expected an int >= 1, got 0" in capsys.readouterr().err


def test_llama_cli_refuses_a_checkpoint_that_is_not_a_llama(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    assert main(["llama", "--checkpoint", str(tmp_path)]) == 2
    assert "--checkpoint: expected a Hugging Face Llama directory" in capsys.readouterr().err
