#!/usr/bin/env python3
"""Read an `undercurrent capture` dataset with numpy alone (no torch, no safetensors package).

A dataset directory holds manifest.json, shard-NNNNN.safetensors (one 2-D tensor per extraction
point and layer, named "POINT/LAYER", rows = records) and, per shard, shard-NNNNN.ndjson: one
JSON object per row (prompt_id, label, point, layer, token_pos, is_generated, generated_index,
token_id, token_text, and the shard / tensor / tensor_row the activation lives in).

    from undercurrent_dataset import Dataset
    ds = Dataset("build/acts")
    rows = ds.rows(point="last_token", layer=4)     # index entries, dataset order
    x = ds.activations(rows)                        # float32 [len(rows), hidden_size]

Run as a script to print a summary:  build/venv/bin/python examples/undercurrent_dataset.py DIR
"""

import json
import os
import struct
import sys

import numpy as np

_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_safetensors_header(path):
    """Returns (header dict without __metadata__, metadata dict, byte offset of the data)."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        header = json.loads(f.read(length).decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    return header, metadata, 8 + length


def read_safetensors(path):
    """Every tensor of a safetensors file as a float32 numpy array (memory-mapped for F32)."""
    header, _, base = read_safetensors_header(path)
    tensors = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype}; expected F32, F16 or BF16")
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = (end - start) // np.dtype(_DTYPES[dtype]).itemsize
        raw = np.memmap(path, dtype=_DTYPES[dtype], mode="r", offset=base + start, shape=(count,))
        if dtype == "BF16":  # the high half of a float32
            values = (raw.astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            values = raw.astype(np.float32)
        else:
            values = raw
        tensors[name] = values.reshape(shape)
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: float32 array} as a safetensors file (F32, C order)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(array)),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


class Dataset:
    """A capture dataset: its manifest, its index rows, and lazy access to the shards."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
            self.manifest = json.load(f)
        if self.manifest.get("format") != "undercurrent-activations":
            raise ValueError(f"{path}: not an undercurrent activation dataset")
        self.index = []  # only committed shards: a dataset still being captured reads too
        for shard in self.manifest["shards"]:
            with open(os.path.join(path, shard["index"]), encoding="utf-8") as f:
                self.index.extend(json.loads(line) for line in f if line.strip())
        self._shards = {}

    @property
    def complete(self):
        return bool(self.manifest["complete"])

    @property
    def hidden_size(self):
        return int(self.manifest["hidden_size"])

    def width(self, point):
        """Values per row of `point`: hidden_size, or num_experts for router_logits and
        expert_weights (the manifest's point_widths)."""
        return int(self.manifest.get("point_widths", {}).get(point, self.hidden_size))

    def point(self, name):
        """The manifest entry of an extraction point (tensor_type, layers, position, ...)."""
        for p in self.manifest["points"]:
            if p["name"] == name:
                return p
        names = ", ".join(p["name"] for p in self.manifest["points"])
        raise KeyError(f"no point {name!r} in {self.path} (points: {names})")

    def rows(self, **where):
        """Index rows whose fields equal the given values, e.g. rows(point="p", layer=4)."""
        return [r for r in self.index if all(r.get(k) == v for k, v in where.items())]

    def shard(self, name):
        if name not in self._shards:
            self._shards[name] = read_safetensors(os.path.join(self.path, name))
        return self._shards[name]

    def activations(self, rows):
        """float32 [len(rows), width]: the activation of each index row (all of one width)."""
        widths = {self.width(r["point"]) for r in rows}
        if len(widths) > 1:
            raise ValueError(f"rows of several widths {sorted(widths)}: select one point's rows")
        out = np.empty((len(rows), widths.pop() if widths else self.hidden_size), dtype=np.float32)
        groups = {}  # (shard, tensor) -> (positions in out, rows of the tensor)
        for i, r in enumerate(rows):
            where, which = groups.setdefault((r["shard"], r["tensor"]), ([], []))
            where.append(i)
            which.append(r["tensor_row"])
        for (shard, tensor), (where, which) in groups.items():
            out[where] = self.shard(shard)[tensor][which]
        return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0])
        print("usage: undercurrent_dataset.py DATASET_DIR")
        return 2
    ds = Dataset(argv[1])
    m = ds.manifest
    print(f"{argv[1]}: {'complete' if ds.complete else 'incomplete'}, {m['num_rows']} rows, "
          f"{len(m['shards'])} shards, {m['dtype']}, hidden_size {m['hidden_size']}")
    for p in m["points"]:
        for layer in p["layers"]:
            n = sum(1 for r in ds.index if r["point"] == p["name"] and r["layer"] == layer)
            print(f"  {p['name']}/{layer}: {p['tensor_type']} at {p['position']}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
