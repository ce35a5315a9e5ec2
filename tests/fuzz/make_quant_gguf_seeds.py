#!/usr/bin/python3
"""Writes the quantized-type seeds of the GGUF fuzz corpus (tests/fuzz/corpus/gguf/*quant*).

Stdlib only, written from the GGUF format description and ggml's type table (type id, block
elements, block bytes), not from Tessera's writer: v3 header, one metadata key, tensor
infos, data aligned to 32 and filled with a fixed byte pattern. Run from the repository root:

    /usr/bin/python3 tests/fuzz/make_quant_gguf_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")

# name: (ggml type id, elements per block, bytes per block)
TYPES = {
    "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34),
    "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210), "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136), "MXFP4": (39, 32, 17),
    "IQ2_XXS": (16, 256, 66), "IQ3_S": (21, 256, 110), "IQ1_M": (29, 256, 56), "TQ1_0": (34, 256, 54),
    "TQ2_0": (35, 256, 66),
}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensors, data_bytes=None):
    """tensors: [(name, type name or raw id, ne)]; data_bytes overrides the data size."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    out += s("general.file_type") + struct.pack("<II", 4, 15)
    offset, infos = 0, b""
    for name, t, ne in tensors:
        tid, be, bb = TYPES[t] if isinstance(t, str) else (t, 32, 32)
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tid, offset)
        rows = 1
        for d in ne[1:]:
            rows *= d
        offset += (rows * (ne[0] // be) * bb + 31) // 32 * 32
    out += infos
    out += b"\0" * (-len(out) % 32)
    size = offset if data_bytes is None else data_bytes
    return out + bytes((i * 37 + 11) & 0xFF for i in range(size))


SUPPORTED = ["Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"]
SEEDS = {
    "valid_quant_types": gguf([(f"t.{t.lower()}", t, [256, 2]) for t in SUPPORTED]),
    "valid_quant_expert_stack": gguf([("blk.0.ffn_down_exps.weight", "Q6_K", [256, 2, 2]),
                                      ("blk.0.ffn_up_exps.weight", "MXFP4", [64, 4, 2])]),
    "bad_quant_truncated_q6_k": gguf([("blk.0.ffn_down.weight", "Q6_K", [256, 2])], data_bytes=400),
    "bad_quant_row_iq4_xs": gguf([("blk.0.attn_q.weight", "IQ4_XS", [96, 2])]),
    "bad_quant_refused_iq2_xxs": gguf([("blk.0.attn_k.weight", "IQ2_XXS", [256, 1])]),
    "bad_quant_refused_tq1_0": gguf([("blk.0.attn_v.weight", "TQ1_0", [256, 1])]),
    "bad_quant_unknown_type_43": gguf([("x.weight", 43, [32, 1])]),
}

if __name__ == "__main__":
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")
