"""ttdecode.ttnn_backend.StepCache: the bounded least-recently-used cache of per-shape steps that FlashDecode,
rotary_kv_append and the combine keep (plan once, run per step)."""

from __future__ import annotations

from ttdecode.ttnn_backend import StepCache


def test_a_step_is_made_once_per_key_and_the_least_recently_used_goes_first() -> None:
    made = []
    cache = StepCache(2)

    def maker(key: str):
        return lambda: made.append(key) or f"step {key}"

    assert cache.get_or_make("a", maker("a")) == "step a"
    assert cache.get_or_make("b", maker("b")) == "step b"
    assert cache.get_or_make("a", maker("a")) == "step a"      # a hit: not made again, now most recent
    assert cache.get_or_make("c", maker("c")) == "step c"      # over size: "b" (least recent) is dropped
    assert made == ["a", "b", "c"] and list(cache) == ["a", "c"]
    assert cache.get_or_make("b", maker("b")) == "step b" and made[-1] == "b" and list(cache) == ["c", "b"]
