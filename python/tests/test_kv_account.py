"""Several engines in one process with the automatic KV cache: each open model's cache is in a
process-wide account, and a model opened after it sizes its automatic budget from the memory
available less that account (engine/scheduling/kv_cache_plan.h). Caches are mapped lazily, so
without the account a second engine would size from memory the first already promised."""

from __future__ import annotations

import pytest

from undercurrent import LLM, SamplingParams, reserved_kv_cache_bytes

GiB = 1 << 30


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def test_the_account_holds_every_open_model_and_releases_at_close(tiny_model):
    base = reserved_kv_cache_bytes()
    a = LLM(tiny_model, threads=1)
    b = LLM(tiny_model, threads=1, kv_cache_memory="8MiB")
    try:
        assert a.kv_cache_bytes > 0 and b.kv_cache_bytes > 0
        assert b.kv_cache_bytes <= 8 << 20
        assert reserved_kv_cache_bytes() == base + a.kv_cache_bytes + b.kv_cache_bytes
        a.close()
        assert reserved_kv_cache_bytes() == base + b.kv_cache_bytes
        out = b.generate("Once upon a time", SamplingParams(max_tokens=4, temperature=0))
        assert len(out[0].outputs[0].token_ids) == 4
    finally:
        a.close()
        b.close()
    assert reserved_kv_cache_bytes() == base


def test_a_second_automatic_engine_sizes_from_what_the_first_left(tiny_model):
    # The first model reserves all but ~6 GiB of the available memory (mapped, never touched:
    # it generates nothing). The second, automatic, gets a quarter of what is left: ~1.5 GiB, not
    # the 4 GiB cap that the machine's free memory alone would give. Many sequences, so that the
    # budget and not max_num_seqs bounds its cache.
    available = mem_available()
    if available < 16 * GiB:
        pytest.skip(f"needs 16 GiB available to leave a measurable remainder, has {available >> 20} MiB")
    first_bytes = available - 6 * GiB
    with LLM(tiny_model, threads=1, kv_cache_memory=first_bytes, max_num_seqs=1 << 15) as first:
        assert first.kv_cache_bytes > available - 7 * GiB
        with LLM(tiny_model, threads=1, max_num_seqs=1 << 15) as second:
            budget = second.probed_model.kv_cache_budget_bytes
            assert budget < 3 * GiB, budget  # ~ (6 GiB + what other processes freed) / 4
            assert budget > GiB // 4, budget
            assert second.generate("Once upon a time", SamplingParams(max_tokens=3))[0].outputs[0].token_ids
    with LLM(tiny_model, threads=1, max_num_seqs=1 << 15) as alone:
        assert alone.probed_model.kv_cache_budget_bytes >= 3 * GiB  # the cap: min(available / 4, 4 GiB)
