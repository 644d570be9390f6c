#!/usr/bin/env python3
"""stories260K with a vocabulary that no TP size above one divides: 509 tokens (a prime).

Reads tests/testdata/stories260K/stories260K.gguf (llama2.c's stories260K, converted by llama.cpp)
and writes tests/testdata/stories260K/stories260K-vocab509.gguf: the same metadata and weights
with the last three tokens dropped — tokenizer.ggml.tokens / scores / token_type cut to 509 and
the rows of token_embd.weight and output.weight cut to match. The SentencePiece tokenizer then
never produces them (their pieces are merges of pieces that remain). Under TP 2 the vocabulary
shards are 255 + 254 rows, under TP 4 128 + 127 + 127 + 127 (layers/vocab_parallel_embedding.h);
tests/distributed runs it at TP 2 and TP×PP 2×2 against one process.

Needs numpy and gguf. Usage: python3 tools/reference/make_odd_vocab_fixture.py [OUT]
"""

import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

VOCAB = 509
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "tests", "testdata", "stories260K", "stories260K.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests", "testdata", "stories260K", "stories260K-vocab509.gguf")
VOCAB_TENSORS = ("token_embd.weight", "output.weight")
VOCAB_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def field_value(field):
    """A reader field as a Python value (scalars, strings and arrays of either)."""
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        items = [field.parts[i] for i in field.data]
        if field.types[1] == GGUFValueType.STRING:
            return [bytes(item).decode("utf-8") for item in items], field.types[1]
        return [item.tolist()[0] for item in items], field.types[1]
    part = field.parts[field.data[0]]
    if kind == GGUFValueType.STRING:
        return bytes(part).decode("utf-8"), None
    return part.tolist()[0], None


def main(out):
    reader = GGUFReader(SRC)
    arch, _ = field_value(reader.fields["general.architecture"])
    writer = GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, sub = field_value(field)
        if name in VOCAB_ARRAYS:
            value = value[:VOCAB]
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(name, value, kind, sub_type=sub)
        else:
            writer.add_key_value(name, value, kind)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name in VOCAB_TENSORS:
            data = data[:VOCAB]
        writer.add_tensor(tensor.name, data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {os.path.relpath(out)}: vocabulary {VOCAB}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
