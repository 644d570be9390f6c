#!/usr/bin/env python3
"""Quantized GGUF copies of tiny-gqa2 with independent float32 reference logits.

Produces tests/testdata/gguf/<type>/ (or --out/<type>/) for type in q8_0, q4_0, q4_1, f16, bf16:
  tiny-gqa2-<TYPE>.gguf  tests/testdata/tiny-gqa2/tiny-gqa2.gguf (F32, llama arch) with every 2-D
                         weight (token_embd, output, attn_q/k/v/output, ffn_gate/up/down) stored
                         as <TYPE> via gguf.quants.quantize; 1-D norm weights stay F32. All
                         metadata (tokenizer included) is copied unchanged, except
                         general.file_type (set to the llama.cpp file type of <TYPE>) and
                         general.quantization_version (2, added for block types); keys keep the
                         source order except general.architecture, which GGUFWriter writes first.
                         Tensor order, names and shapes are those of the source; alignment 32.
  reference.json         full float32 logits at all 16 positions of the "short" sequence of
                         tests/testdata/golden/tiny-gqa2_logits.json (ids in the file), argmax
                         and top-1/top-2 margin per position, and how far they are from the F32
                         golden logits.

Reference forward (independent of any GGUF loader): each tensor of the written file is read back
with gguf.GGUFReader and dequantized with gguf.quants.dequantize to float32; attn_q/attn_k rows
are permuted from the GGUF/llama2.c interleaved-pair order to the Hugging Face rotate_half order
(within each head, row 2i -> i and 2i+1 -> i + head_dim/2: reshape (heads, head_dim/2, 2, in),
swap axes 1 and 2); the weights are loaded into a transformers LlamaForCausalLM built from
tests/testdata/tiny-gqa2/hf/config.json (tied embeddings: output.weight must dequantize to exactly
token_embd.weight, checked) and run in float32 (eager attention, 2 threads, one no-cache forward).
Before anything else the same path on the F32 source must reproduce
tests/testdata/golden/tiny-gqa2_logits.json ("short", all 512 logits) within 1e-4.
Cross-check: transformers' own GGUF loader (from_pretrained(dir, gguf_file=...)) on each written
file; its max |difference| from the reference is recorded (it uses the same gguf dequantizers).

Run with (also in every reference.json "meta"): python 3.11.7, torch 2.15.0 (CPU),
transformers 5.24.0, gguf 0.19.0, numpy 2.4.6, accelerate 1.15.0.

Usage: python3 tools/reference/make_gguf_fixtures.py [--out DIR]
Deterministic: re-running rewrites byte-identical files.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TD = os.path.join(REPO, "tests", "testdata")
SRC = os.path.join(TD, "tiny-gqa2", "tiny-gqa2.gguf")
HF_CONFIG = os.path.join(TD, "tiny-gqa2", "hf", "config.json")
GOLDEN = os.path.join(TD, "golden", "tiny-gqa2_logits.json")
TOL_F32 = 1e-4

# (folder, GGML type name, llama.cpp general.file_type)
TYPES = [
    ("q8_0", "Q8_0", 7),
    ("q4_0", "Q4_0", 2),
    ("q4_1", "Q4_1", 3),
    ("f16", "F16", 1),
    ("bf16", "BF16", 32),
]

GGUF_TO_HF = {
    "token_embd": "model.embed_tokens.weight",
    "output_norm": "model.norm.weight",
    "output": "lm_head.weight",
    "attn_norm": "input_layernorm.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight",
    "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight",
    "attn_output": "self_attn.o_proj.weight",
    "ffn_gate": "mlp.gate_proj.weight",
    "ffn_up": "mlp.up_proj.weight",
    "ffn_down": "mlp.down_proj.weight",
}


def field_value(field):
    import gguf

    vt = gguf.GGUFValueType
    t0 = field.types[0]
    if t0 == vt.ARRAY:
        return field.contents(), t0, field.types[-1]
    return field.contents(), t0, None


def write_quantized(src_reader, qname, file_type, path):
    import gguf
    from gguf.quants import quantize

    qtype = gguf.GGMLQuantizationType[qname]
    arch = src_reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for key, field in src_reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val, vtype, sub = field_value(field)
        if key == "general.file_type":
            val = file_type
        w.add_key_value(key, val, vtype, sub)
    if "general.file_type" not in src_reader.fields:
        w.add_key_value("general.file_type", file_type, gguf.GGUFValueType.UINT32)
    if qname not in ("F16", "BF16") and "general.quantization_version" not in src_reader.fields:
        w.add_key_value("general.quantization_version", 2, gguf.GGUFValueType.UINT32)
    kinds = {}
    for t in src_reader.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        data = np.array(t.data, dtype=np.float32)  # shape = reversed(t.shape): [rows, cols]
        if data.ndim == 2:
            q = quantize(data, qtype)
            w.add_tensor(t.name, q, raw_dtype=qtype)
            kinds[t.name] = qname
        else:
            w.add_tensor(t.name, data)
            kinds[t.name] = "F32"
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kinds


def hf_state_dict_from_gguf(path, cfg):
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)
    hd = cfg["head_dim"]
    sd, types = {}, {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        parts = t.name.split(".")
        if parts[0] == "blk":
            layer, kind = parts[1], parts[2]
            name = f"model.layers.{layer}.{GGUF_TO_HF[kind]}"
        else:
            kind = parts[0]
            name = GGUF_TO_HF[kind]
        if kind in ("attn_q", "attn_k"):
            heads = shape[0] // hd
            w = w.reshape(heads, hd // 2, 2, shape[1]).swapaxes(1, 2).reshape(shape)
        sd[name] = np.ascontiguousarray(w)
        types[t.name] = gguf.GGMLQuantizationType(t.tensor_type).name
    return sd, types


def forward(sd, cfg, ids):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    model = LlamaForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    sd = dict(sd)
    lm = sd.pop("lm_head.weight")
    assert config.tie_word_embeddings
    assert np.array_equal(lm, sd["model.embed_tokens.weight"]), "output != token_embd"
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()},
                                                strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()


def transformers_gguf_logits(path, ids):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d, f = os.path.dirname(path), os.path.basename(path)
    config = AutoConfig.from_pretrained(d, gguf_file=f)
    # tokenizer.ggml.padding_token_id is 0xFFFFFFFF ("none", as llama.cpp's llama2.c converter
    # writes it); transformers would take it literally and fail building nn.Embedding
    if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
        config.pad_token_id = None
    m = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, config=config, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        return m(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(TD, "gguf"))
    args = ap.parse_args()

    import gguf
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)

    with open(HF_CONFIG, encoding="utf-8") as f:
        cfg = json.load(f)
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)["short"]
    ids = golden["ids"]
    g_logits = np.array([p["logits"] for p in golden["positions"]], dtype=np.float32)
    assert g_logits.shape == (len(ids), cfg["vocab_size"])

    # 1) the F32 source through the same path must reproduce the llama2.c goldens
    sd32, _ = hf_state_dict_from_gguf(SRC, cfg)
    l32 = forward(sd32, cfg, ids)
    d32 = float(np.max(np.abs(l32 - g_logits)))
    print(f"F32 source vs golden: max |diff| {d32:.3g}")
    assert d32 <= TOL_F32, d32
    assert (l32.argmax(-1) == g_logits.argmax(-1)).all()

    src_reader = gguf.GGUFReader(SRC)
    os.makedirs(args.out, exist_ok=True)
    for folder, qname, ftype in TYPES:
        d = os.path.join(args.out, folder)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        fname = f"tiny-gqa2-{qname}.gguf"
        path = os.path.join(d, fname)
        kinds = write_quantized(src_reader, qname, ftype, path)
        sd, types = hf_state_dict_from_gguf(path, cfg)
        assert types == kinds, (types, kinds)
        logits = forward(sd, cfg, ids)
        tf = transformers_gguf_logits(path, ids)
        d_tf = float(np.max(np.abs(tf - logits)))
        diff_golden = np.abs(logits - g_logits)
        w_err = {
            k: float(np.max(np.abs(sd[k] - sd32[k])))
            for k in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                      "model.layers.0.mlp.down_proj.weight")
        }
        meta = {
            "versions": versions(),
            "script": "tools/reference/make_gguf_fixtures.py",
            "file": fname,
            "sha256": sha256_file(path),
            "source": "tests/testdata/tiny-gqa2/tiny-gqa2.gguf (sha256 %s)" % sha256_file(SRC),
            "weight_type": qname,
            "general.file_type": ftype,
            "tensor_types": {"2-D weights": qname, "1-D norms": "F32"},
            "quantizer": "gguf.quants.quantize (numpy port of ggml's reference quantize_row_*_ref; "
            "F16 = numpy float16 round-to-nearest-even, BF16 = round-to-nearest-even)",
            "ids_from": "tests/testdata/golden/tiny-gqa2_logits.json 'short'",
            "compute": "gguf.quants.dequantize -> float32, q/k rows permuted to HF rotate_half "
            "order, transformers LlamaForCausalLM (tiny-gqa2/hf/config.json), float32, eager, "
            "one no-cache forward",
            "f32_path_vs_golden_max_abs_diff": d32,
            "transformers_gguf_loader_max_abs_diff": d_tf,
            "vs_f32_golden": {
                "max_abs_diff": float(diff_golden.max()),
                "mean_abs_diff": float(diff_golden.mean()),
                "argmax_equal_positions": int((logits.argmax(-1) == g_logits.argmax(-1)).sum()),
            },
            "max_abs_weight_error_vs_f32": w_err,
        }
        ref = {
            "meta": meta,
            "input_ids": ids,
            "argmax": [int(x) for x in logits.argmax(-1)],
            "top2_margin": [float(np.diff(np.sort(r)[-2:])[0]) for r in logits],
            "logits": [r.tolist() for r in logits],
        }
        dump_json(ref, os.path.join(d, "reference.json"))
        print(
            f"{qname}: {os.path.getsize(path)} bytes, vs golden max {diff_golden.max():.4g}, "
            f"argmax equal {meta['vs_f32_golden']['argmax_equal_positions']}/{len(ids)}, "
            f"transformers-gguf diff {d_tf:.3g}"
        )


if __name__ == "__main__":
    main()
