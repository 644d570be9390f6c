#!/usr/bin/env python3
"""Tiny random GPT-2, GPT-NeoX (Pythia) and OLMo-2 checkpoints with transformers' logits, greedy
continuations and per-layer activations, each also as llama.cpp GGUF.

Produces tests/testdata/arch/<case>/ (or --out/<case>/) for each case below:
  config.json              the layout of published Hub checkpoints of the family (GPT-2's n_embd /
                           n_layer / n_head; Pythia's rotary_pct / rotary_emb_base; OLMo-2's
                           rope_theta / rope_scaling; "torch_dtype"), reloaded with transformers to
                           prove it means the same model.
  model.safetensors        save_pretrained (GPT-2's Conv1D weights as [in, out], NeoX's fused
                           query_key_value rows per head, as on the Hub).
  tokenizer.json           a byte-level BPE (GPT-2's pre-tokenizer and decoder) of VOCAB tokens
                           trained with `tokenizers` on tests/testdata/perplexity/stories.txt;
                           "<|endoftext|>" is id 0 (BOS and EOS, as GPT-2's and Pythia's).
  model.gguf               F32, the way llama.cpp's convert_hf_to_gguf.py writes the family: its
                           tensor names and metadata ("gpt2": Conv1D transposed, position_embd,
                           output.weight a copy of token_embd; "gptneox": attn_qkv regrouped to
                           q, k, v rows, use_parallel_residual, rope.dimension_count =
                           rotary_pct * head_dim; "olmo2": post_attention_norm / post_ffw_norm,
                           full-width attn_q_norm / attn_k_norm) and the tokenizer as
                           tokenizer.ggml.model "gpt2" (tokens, token types, merges).
  reference.json           input ids, float32 logits at every position, argmax, a 16-token greedy
                           continuation (EOS not a stop) with its top-1/top-2 margins, and "taps":
                           per layer and position, what the block adds to the residual stream and
                           the stream after it, read from transformers' modules with forward hooks:
                             attn_out        GPT-2 h.L.attn output, NeoX layers.L.attention output
                                             (both after the output projection and its bias),
                                             OLMo-2 layers.L.post_attention_layernorm output
                             mlp_out         GPT-2 h.L.mlp, NeoX layers.L.mlp, OLMo-2
                                             layers.L.post_feedforward_layernorm output
                             residual_stream the decoder layer's output (hidden_states[L + 1])
                             final_norm      ln_f / final_layer_norm / model.norm output
                           and "tokenizer": a few texts with the ids `tokenizers` gives them.

Cases:
  gpt2                  GPT2LMHeadModel, 2 layers, hidden 64, 4 heads, n_inner 256, tied.
  gptneox_parallel      GPTNeoXForCausalLM, use_parallel_residual true, rotary_pct 0.25 (4 of 16
                        dims rotated), 2 layers, hidden 64, 4 heads, intermediate 256, untied.
  gptneox_sequential    the same with use_parallel_residual false and rotary_pct 1.0.
  olmo2                 Olmo2ForCausalLM, 2 layers, hidden 64, 4 heads / 2 KV heads,
                        intermediate 128, rope_theta 5e5, untied.

Weights: N(0, std) per tensor drawn with torch.Generator(seed) in state_dict order; std =
c / sqrt(fan_in) (q/k c=1.5, v c=1.0, output projections c=2.6, MLP input c=1.0, MLP output
c=3.9; a fused q/k/v 1.5), embeddings and heads 0.65, GPT-2's positions 0.3, biases 0.3, norm
weights 1 + 0.1 N(0,1), LayerNorm biases 0.1 N(0,1). The seed is the first of base_seed,
base_seed+1, ... whose greedy continuation keeps every top-1/top-2 margin >= 0.02.
Input ids: numpy default_rng(4321 + case index), 24 ids uniform in [1, VOCAB).
Compute: float32, torch.set_num_threads(2), attn_implementation="eager".

Run with (also in every reference.json "meta"): python 3.11.7, torch 2.15.0 (CPU),
transformers 5.25.0, tokenizers, safetensors, gguf, numpy 2.4.6.

Usage: python3 tools/reference/make_interp_arch_fixtures.py [--out DIR] [--only CASE ...]
Deterministic: re-running rewrites identical files (existing case folders are replaced).
"""

import json
import math
import os
import shutil
import sys

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_fixtures import greedy  # noqa: E402
from refutil import dump_json, run_fixture_cases, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VOCAB = 512
N_IDS = 24
MIN_MARGIN = 0.02
EOT = "<|endoftext|>"
TOKENIZER_TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "  Hello,\tworld!  It's 2024 -- don't panic... ok?",
    "naïve café über 😀 end",
]

CASES = [
    dict(
        name="gpt2",
        cls="GPT2LMHeadModel",
        gguf="gpt2",
        base_seed=3100,
        config=dict(
            vocab_size=VOCAB,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_inner=256,
            n_positions=128,
            bos_token_id=0,
            eos_token_id=0,
        ),
    ),
    dict(
        name="gptneox_parallel",
        cls="GPTNeoXForCausalLM",
        gguf="gptneox",
        base_seed=3200,
        config=dict(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            max_position_embeddings=128,
            rotary_pct=0.25,
            use_parallel_residual=True,
            bos_token_id=0,
            eos_token_id=0,
        ),
    ),
    dict(
        name="gptneox_sequential",
        cls="GPTNeoXForCausalLM",
        gguf="gptneox",
        base_seed=3300,
        config=dict(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            max_position_embeddings=128,
            rotary_pct=1.0,
            use_parallel_residual=False,
            bos_token_id=0,
            eos_token_id=0,
        ),
    ),
    dict(
        name="olmo2",
        cls="Olmo2ForCausalLM",
        gguf="olmo2",
        base_seed=3400,
        config=dict(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            max_position_embeddings=128,
            rms_norm_eps=1e-6,
            rope_theta=500000.0,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=1,
        ),
    ),
]

# (name fragment, c) for matrices: std = c / sqrt(fan_in).
MATRIX_C = [
    ("c_attn", 1.5),
    ("query_key_value", 1.5),
    ("q_proj", 1.5),
    ("k_proj", 1.5),
    ("v_proj", 1.0),
    ("attn.c_proj", 2.6),
    ("attention.dense", 2.6),
    ("o_proj", 2.6),
    ("c_fc", 1.0),
    ("dense_h_to_4h", 1.0),
    ("gate_proj", 1.0),
    ("up_proj", 1.0),
    ("mlp.c_proj", 3.9),
    ("dense_4h_to_h", 3.9),
    ("down_proj", 3.9),
]


def init_weights(model, seed, conv1d):
    import torch

    g = torch.Generator().manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            z = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in name or ".ln_" in name or name.endswith("ln_f.weight") or (
                "ln_f" in name
            ):
                if name.endswith(".bias"):
                    p.copy_((0.1 * z).to(p.dtype))
                else:
                    p.copy_((1.0 + 0.1 * z).to(p.dtype))
            elif name.endswith(".bias"):
                p.copy_((0.3 * z).to(p.dtype))
            elif name.endswith("wpe.weight"):
                p.copy_((0.3 * z).to(p.dtype))
            elif any(k in name for k in ("wte", "embed_in", "embed_out", "embed_tokens", "lm_head")):
                p.copy_((0.65 * z).to(p.dtype))
            else:
                c = next(c for k, c in MATRIX_C if k in name)
                fan_in = p.shape[0] if conv1d else p.shape[1]
                p.copy_((c / math.sqrt(fan_in) * z).to(p.dtype))


def train_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with open(os.path.join(REPO, "tests", "testdata", "perplexity", "stories.txt"), encoding="utf-8") as f:
        text = f.read()
    tok.train_from_iterator([text], trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id(EOT) == 0
    tok.save(path)
    return tok


def to_hub_layout(case, cfg_path):
    """transformers 5's config.json -> the keys published checkpoints of the family carry."""
    with open(cfg_path, encoding="utf-8") as f:
        c = json.load(f)
    rp = dict(c.pop("rope_parameters", None) or {})
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    if case["cls"] == "GPTNeoXForCausalLM":
        c["rotary_pct"] = rp.get("partial_rotary_factor", 1.0)
        c["rotary_emb_base"] = rp.get("rope_theta", 10000.0)
    elif case["cls"] == "Olmo2ForCausalLM":
        c["rope_theta"] = rp["rope_theta"]
        c["rope_scaling"] = None
    c = dict(sorted(c.items()))
    with open(cfg_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    return c


def module_names(cls):
    """(blocks, attn_out module, mlp_out module, final norm) attribute paths per family."""
    if cls == "GPT2LMHeadModel":
        return "transformer.h", "attn", "mlp", "transformer.ln_f"
    if cls == "GPTNeoXForCausalLM":
        return "gpt_neox.layers", "attention", "mlp", "gpt_neox.final_layer_norm"
    return "model.layers", "post_attention_layernorm", "post_feedforward_layernorm", "model.norm"


def capture_taps(model, cls, ids, names=None):
    """names: (blocks, attn_out module, mlp_out module, final norm); default module_names(cls)."""
    import torch

    blocks_path, attn_name, mlp_name, final_path = names or module_names(cls)
    blocks = model.get_submodule(blocks_path)
    taps = {"attn_out": [], "mlp_out": [], "residual_stream": []}
    handles = []

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    for block in blocks:
        for site, module in (
            ("attn_out", block.get_submodule(attn_name)),
            ("mlp_out", block.get_submodule(mlp_name)),
            ("residual_stream", block),
        ):
            handles.append(
                module.register_forward_hook(
                    lambda m, i, o, site=site: taps[site].append(first(o)[0].float().numpy().copy())
                )
            )
    final = []
    handles.append(
        model.get_submodule(final_path).register_forward_hook(
            lambda m, i, o: final.append(o[0].float().numpy().copy())
        )
    )
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    for h in handles:
        h.remove()
    # the block outputs are transformers' hidden_states[L + 1] (the last before the final norm)
    hs = out.hidden_states
    for layer, stream in enumerate(taps["residual_stream"][:-1]):
        assert np.array_equal(stream, hs[layer + 1][0].float().numpy()), layer
    taps["final_norm"] = final
    return taps, out.logits[0].float().numpy()


def bytes_to_unicode():
    """GPT-2's byte <-> printable-character table (the byte-level alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def add_bpe_tokenizer(w, tok_path):
    """The byte-level BPE of tok_path as GGUF "gpt2" tokenizer metadata (tokens in the byte-level
    alphabet, merges "a b", EOT the only control token; BOS = EOS = 0, no BOS added)."""
    with open(tok_path, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t == EOT else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)


def write_gguf(case, cfg, model, tok_path, path):
    """llama.cpp's layout of the family (see the header), F32."""
    import gguf

    arch = case["gguf"]
    w = gguf.GGUFWriter(path, arch)
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    tensors = []
    if arch == "gpt2":
        h, n_layer, n_head = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
        w.add_context_length(cfg["n_positions"])
        w.add_embedding_length(h)
        w.add_feed_forward_length(cfg["n_inner"])
        w.add_block_count(n_layer)
        w.add_head_count(n_head)
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
        p = "transformer."
        tensors += [
            ("token_embd.weight", sd[p + "wte.weight"]),
            ("position_embd.weight", sd[p + "wpe.weight"]),
            ("output_norm.weight", sd[p + "ln_f.weight"]),
            ("output_norm.bias", sd[p + "ln_f.bias"]),
            ("output.weight", sd[p + "wte.weight"]),
        ]
        names = [
            ("ln_1", "attn_norm", False),
            ("attn.c_attn", "attn_qkv", True),
            ("attn.c_proj", "attn_output", True),
            ("ln_2", "ffn_norm", False),
            ("mlp.c_fc", "ffn_up", True),
            ("mlp.c_proj", "ffn_down", True),
        ]
        for L in range(n_layer):
            for hf, gg, conv in names:
                wt = sd[f"{p}h.{L}.{hf}.weight"]
                tensors.append((f"blk.{L}.{gg}.weight", wt.T if conv else wt))
                tensors.append((f"blk.{L}.{gg}.bias", sd[f"{p}h.{L}.{hf}.bias"]))
    elif arch == "gptneox":
        h, n_layer, n_head = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        hd = h // n_head
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(h)
        w.add_block_count(n_layer)
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_rope_dimension_count(int(cfg["rotary_pct"] * hd))
        w.add_rope_freq_base(cfg["rotary_emb_base"])
        w.add_head_count(n_head)
        w.add_parallel_residual(cfg["use_parallel_residual"])
        w.add_layer_norm_eps(cfg["layer_norm_eps"])
        p = "gpt_neox."
        tensors += [
            ("token_embd.weight", sd[p + "embed_in.weight"]),
            ("output_norm.weight", sd[p + "final_layer_norm.weight"]),
            ("output_norm.bias", sd[p + "final_layer_norm.bias"]),
            ("output.weight", sd["lm_head.weight"]),
        ]
        for L in range(n_layer):
            q = f"{p}layers.{L}."
            qkv_w = sd[q + "attention.query_key_value.weight"].reshape(n_head, 3, hd, h)
            qkv_b = sd[q + "attention.query_key_value.bias"].reshape(n_head, 3, hd)
            tensors.append(
                (f"blk.{L}.attn_qkv.weight", np.concatenate([qkv_w[:, i].reshape(-1, h) for i in range(3)]))
            )
            tensors.append(
                (f"blk.{L}.attn_qkv.bias", np.concatenate([qkv_b[:, i].reshape(-1) for i in range(3)]))
            )
            for hf, gg in (
                ("input_layernorm", "attn_norm"),
                ("post_attention_layernorm", "ffn_norm"),
                ("attention.dense", "attn_output"),
                ("mlp.dense_h_to_4h", "ffn_up"),
                ("mlp.dense_4h_to_h", "ffn_down"),
            ):
                tensors.append((f"blk.{L}.{gg}.weight", sd[f"{q}{hf}.weight"]))
                tensors.append((f"blk.{L}.{gg}.bias", sd[f"{q}{hf}.bias"]))
    else:  # olmo2
        h, n_layer = cfg["hidden_size"], cfg["num_hidden_layers"]
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(h)
        w.add_block_count(n_layer)
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_head_count(cfg["num_attention_heads"])
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_rope_freq_base(cfg["rope_theta"])
        w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        tensors += [
            ("token_embd.weight", sd["model.embed_tokens.weight"]),
            ("output_norm.weight", sd["model.norm.weight"]),
            ("output.weight", sd["lm_head.weight"]),
        ]
        for L in range(n_layer):
            q = f"model.layers.{L}."
            for hf, gg in (
                ("self_attn.q_proj", "attn_q"),
                ("self_attn.k_proj", "attn_k"),
                ("self_attn.v_proj", "attn_v"),
                ("self_attn.o_proj", "attn_output"),
                ("self_attn.q_norm", "attn_q_norm"),
                ("self_attn.k_norm", "attn_k_norm"),
                ("post_attention_layernorm", "post_attention_norm"),
                ("mlp.gate_proj", "ffn_gate"),
                ("mlp.up_proj", "ffn_up"),
                ("mlp.down_proj", "ffn_down"),
                ("post_feedforward_layernorm", "post_ffw_norm"),
            ):
                tensors.append((f"blk.{L}.{gg}.weight", sd[f"{q}{hf}.weight"]))
    add_bpe_tokenizer(w, tok_path)
    for name, t in tensors:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.chmod(path, 0o644)


def make_case(case, index, out_root):
    import torch
    import transformers

    cls = getattr(transformers, case["cls"])
    cfg_cls = cls.config_class
    rng = np.random.default_rng(4321 + index)
    ids = rng.integers(1, VOCAB, size=N_IDS).tolist()
    conv1d = case["cls"] == "GPT2LMHeadModel"

    seed = case["base_seed"]
    while True:
        cfg = cfg_cls(**case["config"])
        model = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        init_weights(model, seed, conv1d)
        model = model.eval()
        g = greedy(model, ids, 0)
        if g["min_margin"] >= MIN_MARGIN:
            break
        seed += 1
        assert seed < case["base_seed"] + 200, case["name"]

    d = os.path.join(out_root, case["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d, safe_serialization=True)
    if case["cls"] == "GPTNeoXForCausalLM":
        # transformers 5 calls the head lm_head; Pythia's files (and llama.cpp's converter) say
        # embed_out: store the Hub's name (transformers maps it back on load, checked below)
        from safetensors.numpy import load_file, save_file

        st = os.path.join(d, "model.safetensors")
        tensors = load_file(st)
        if "lm_head.weight" in tensors:
            tensors["embed_out.weight"] = tensors.pop("lm_head.weight")
        save_file(tensors, st, metadata={"format": "pt"})
    cfg_hub = to_hub_layout(case, os.path.join(d, "config.json"))
    tok = train_tokenizer(os.path.join(d, "tokenizer.json"))
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)

    ref_model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for k, v in model.state_dict().items():
        assert torch.equal(ref_model.state_dict()[k], v), k
    taps, logits = capture_taps(ref_model, case["cls"], ids)
    with torch.no_grad():
        direct = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    assert np.array_equal(direct, logits), "the reloaded config is another model"
    g2 = greedy(ref_model, ids, 0)
    assert g2["new_ids"] == g["new_ids"]

    write_gguf(case, cfg_hub, ref_model, os.path.join(d, "tokenizer.json"), os.path.join(d, "model.gguf"))
    files = sorted(os.listdir(d))
    meta = {
        "versions": versions(),
        "script": "tools/reference/make_interp_arch_fixtures.py",
        "case": case["name"],
        "architecture": case["cls"],
        "storage_dtype": "float32",
        "compute_dtype": "float32",
        "seed": seed,
        "input_ids": "numpy default_rng(%d): %d ids uniform in [1, %d)" % (4321 + index, N_IDS, VOCAB),
        "logits": "one no-cache forward over input_ids; logits[p] = all vocab logits at position p",
        "greedy": "generate(do_sample=False, max_new_tokens=16, eos_token_id=None), KV cache",
        "taps": "taps[site][layer][position] (final_norm: [0][position]) from forward hooks; "
        "see the script header for the module of each site",
        "files": files,
    }
    ref = {
        "meta": meta,
        "config": cfg_hub,
        "input_ids": ids,
        "argmax": [int(np.argmax(r)) for r in logits],
        "top2_margin": [float(np.diff(np.sort(r)[-2:])[0]) for r in logits],
        "logits": [r.tolist() for r in logits],
        "greedy": g2,
        "taps": {k: [a.tolist() for a in v] for k, v in taps.items()},
        "tokenizer": [{"text": t, "ids": tok.encode(t).ids} for t in TOKENIZER_TEXTS],
    }
    dump_json(ref, os.path.join(d, "reference.json"))
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(
        f"{case['name']}: seed {seed}, files {files}, {size} bytes, min margin "
        f"{g2['min_margin']:.4f}, greedy {g2['new_ids']}"
    )


def main():
    run_fixture_cases(CASES, make_case, __doc__.split("\n")[0],
                      os.path.join(REPO, "tests", "testdata", "arch"))


if __name__ == "__main__":
    main()
