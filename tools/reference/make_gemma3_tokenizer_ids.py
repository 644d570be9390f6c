#!/usr/bin/env python3
"""Token ids of Gemma 3's tokenizer (from the Gemma 3 270M GGUF) as transformers computes them.

Produces tests/testdata/gemma3/tokenizer_ids.json (or --out FILE):
  {"meta": {...versions, gguf sha256...}, "cases": [{kind, text, add_bos, ids, decoded}, ...]}
    kind     "vocab": the 46 llama.cpp tokenizer test strings
                      (tests/testdata/vocab/ggml-vocab-llama-spm.gguf.inp);
             "chat":  conversations rendered through Gemma 3's chat template
                      (tests/testdata/chat_templates/gemma-3-it.jinja) with
                      apply_chat_template(tokenize=False); the text starts with "<bos>" itself;
             "extra": hard cases: emoji, CJK, combining marks, Hangul, long runs of spaces,
                      newlines and tabs, control and user-defined tokens inside text, byte
                      fallback, bare "<" fragments.
    add_bos  whether BOS is added (add_special_tokens): true except for "chat" texts.
    ids      tokenizer(text, add_special_tokens=add_bos)["input_ids"]: control tokens written
             in the text are matched (transformers' default).
    decoded  tokenizer.decode(ids, skip_special_tokens=True).
Only ids and strings: nothing of the vocabulary is stored (the GGUF is under Gemma's terms).

Reference: transformers.AutoTokenizer.from_pretrained(dir, gguf_file=name). transformers builds
a BPE tokenizer from the GGUF metadata (integrations/gguf/gguf_tokenizer_mapping.py,
gemma_tokenizer): whitespace-only tokens stored as real spaces ("  ") are respelled "▁▁", merges
are derived from the vocabulary with the token *position* as priority (not the score), control
tokens (type 3) become special added tokens and user-defined ones (type 4: "\\n" runs, tab
runs, "<table>", ...) plain added tokens; normalizer Replace(" " -> "▁"), no dummy prefix,
byte fallback, BOS added. Note that llama.cpp differs on long runs of spaces: it matches the
user-defined "  ".."  ...  " tokens (2..31 spaces) greedily in the raw text, where transformers
merges "▁" pairs (40 spaces: llama.cpp [31 + 9 spaces], transformers [16 + 24 spaces]).

From: build/models/gemma3/gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3.sh), or $UC_GEMMA3_GGUF;
its sha256 goes into meta. Not committed (Gemma terms).

Run with (versions also written to "meta"): python 3.11, transformers 5.24.0, tokenizers 0.23.3,
gguf 0.19.0, jinja2 3.1.6 (torch is not needed for the tokenizer but transformers' GGUF loader
imports it when installed). Takes ~1 min (transformers derives ~515k merges).

Usage: python3 tools/reference/make_gemma3_tokenizer_ids.py [--out FILE]
Deterministic: re-running with the same versions rewrites a byte-identical file.
"""

import argparse
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refutil import dump_json, sha256_file, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_GGUF = os.path.join(REPO, "build", "models", "gemma3", "gemma-3-270m-q4_k_m.gguf")
VOCAB_INP = os.path.join(REPO, "tests", "testdata", "vocab", "ggml-vocab-llama-spm.gguf.inp")
TEMPLATE = os.path.join(REPO, "tests", "testdata", "chat_templates", "gemma-3-it.jinja")
SEP = "\n__ggml_vocab_test__\n"

EXTRA_STRINGS = [
    # emoji: single code points, ZWJ sequences, skin tones, flags, keycaps
    "🙂 👍🏽 👨‍👩‍👧‍👦 🇫🇷 1️⃣ ❤️",
    "emoji🙂inside🚀words",
    # CJK and other scripts
    "日本語のテキストと中文文本，还有한국어 문장.",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, ไทย",
    # combining marks: decomposed (NFD) and composed (NFC) forms are different text
    "e\u0301 vs \u00e9; A\u030a vs \u00c5; n\u0303 vs \u00f1",
    "a\u0323\u0302 q\u0307\u0323 \u1e0b\u0323",
    # Hangul: precomposed syllables and conjoining jamo
    "\ud55c\uae00 \u1112\u1161\u11ab\u1100\u1173\u11af",
    # whitespace runs
    " " * 40,
    "a" + " " * 33 + "b",
    " " * 2 + "x" + " " * 31 + "y" + " " * 32,
    "\n" * 40,
    "\n" * 31 + "x" + "\n" * 33,
    "\t" * 40 + "tabs",
    " \t \n \r\n\u00a0\u3000 mixed",
    "   leading and trailing   ",
    # control and user-defined tokens written in the text
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos> <pad> <unk> <mask>",
    "<start_of_image><end_of_image>[multimodal]<table><tr><td>cell</td></tr></table>",
    "<unused0><unused6241><image_soft_token>",
    "<start_of_turn <end_of_turn> <start_of_turnx <<start_of_turn>>",
    "a<b>bold</b> <i>it</i> <code>x</code> <h1>T</h1>",
    # byte fallback and rare characters
    "\u0000\u0001\u001f\u007f",
    "\U0010fffd \U000e0001 \ufffd \ue000",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕿𝖊𝖝𝖙 ①②③ ｆｕｌｌｗｉｄｔｈ",
    # code and numbers
    "def f(x):\n    return x ** 2  # square\n\n\nprint(f(12345678901234567890))",
    "3.14159 1,000,000 -42 0x1F 1e-9 ½ ¾",
    "URL: https://example.com/a?b=c&d=e#f",
    # a long mixed paragraph
    "The quick brown fox jumps over the lazy dog. " * 8,
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Hi there"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Grüße 🙂 日本語  with  two spaces\n\nand newlines"}],
    [{"role": "user", "content": "  padded question \n\n"},
     {"role": "assistant", "content": "\tpadded answer  "},
     {"role": "user", "content": "next"}],
]


def read_vocab_strings():
    with open(VOCAB_INP, encoding="utf-8", newline="") as f:
        text = f.read()
    parts = text.split(SEP)
    assert parts[-1] == "", "the .inp file ends with a separator"
    return parts[:-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "testdata", "gemma3",
                                                      "tokenizer_ids.json"))
    args = parser.parse_args()
    gguf_path = os.environ.get("UC_GEMMA3_GGUF") or DEFAULT_GGUF
    if not os.path.isfile(gguf_path):
        raise SystemExit(f"{gguf_path} not found: run scripts/fetch-gemma3.sh or set UC_GEMMA3_GGUF")

    import jinja2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path),
                                        gguf_file=os.path.basename(gguf_path))
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()

    texts = [("vocab", s, True) for s in read_vocab_strings()]
    assert len(texts) == 46, len(texts)
    for messages in CONVERSATIONS:
        for add_generation_prompt in (False, True):
            rendered = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                               add_generation_prompt=add_generation_prompt)
            texts.append(("chat", rendered, False))
    texts += [("extra", s, True) for s in EXTRA_STRINGS]

    cases = []
    n_roundtrip = 0
    for kind, text, add_bos in texts:
        ids = tok(text, add_special_tokens=add_bos)["input_ids"]
        decoded = tok.decode(ids, skip_special_tokens=True)
        n_roundtrip += decoded == text
        cases.append({"kind": kind, "text": text, "add_bos": add_bos, "ids": ids,
                      "decoded": decoded})

    meta = versions("jinja2")
    meta.update({
        "gguf_file": os.path.basename(gguf_path),
        "gguf_sha256": sha256_file(gguf_path),
        "reference": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=...)",
        "vocab_size": len(tok),
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
    })
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    dump_json({"meta": meta, "cases": cases}, args.out)
    print(f"wrote {args.out}: {len(cases)} cases, {n_roundtrip} decode back to their text "
          f"(jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
