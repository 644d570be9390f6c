#!/usr/bin/env python3
"""GGUF fuzz seeds for the newer architectures: their metadata with tiny tensors.

For each of the tiny architecture fixtures written by make_arch_fixtures.py (Gemma 3, Gemma 2,
Qwen3, Llama 3.2, Phi-3, as GGUF in llama.cpp's layout), writes
fuzz/corpus/gguf/<arch>_meta_tiny_tensors.gguf: every metadata key and value of the fixture
(architecture, sliding-window pattern, RoPE bases, soft-capping, tokenizer, ...) and every tensor
name, each tensor cut to its first 32 float32 values as a 1-D tensor, so the seed is a few KiB
and the fuzzer starts from each architecture's config path (ReadCheckpointConfig) and tokenizer.

Usage: python3 tools/reference/make_arch_fuzz_seeds.py   (needs the `gguf` package and numpy)
"""
import os

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHS = ["gemma3", "gemma2", "qwen3", "llama32", "phi3"]
SKIP = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def field_value(field):
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], sub
        return [field.parts[i].tolist()[0] for i in field.data], sub
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), None
    return field.parts[field.data[0]].tolist()[0], None


def write_seed(arch_dir, out_path):
    reader = GGUFReader(os.path.join(arch_dir, "model.gguf"))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = GGUFWriter(out_path, arch)
    for name, field in reader.fields.items():
        if name in SKIP:
            continue
        value, sub = field_value(field)
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_array(name, value) if sub == GGUFValueType.STRING else \
                writer.add_key_value(name, value, GGUFValueType.ARRAY, sub_type=sub)
        else:
            writer.add_key_value(name, value, kind)
    for t in reader.tensors:
        values = np.asarray(t.data, dtype=np.float32).reshape(-1)[:32].copy()
        writer.add_tensor(t.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    for arch in ARCHS:
        out = os.path.join(ROOT, "fuzz/corpus/gguf", f"{arch}_meta_tiny_tensors.gguf")
        write_seed(os.path.join(ROOT, "tests/testdata/arch", arch), out)
        print(f"wrote {os.path.relpath(out, ROOT)} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
