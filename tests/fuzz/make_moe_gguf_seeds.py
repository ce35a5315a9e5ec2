#!/usr/bin/python3
"""Writes the tiny MoE seeds of the GGUF fuzz corpus (tests/fuzz/corpus/gguf/*moe*).

Stdlib only, written from the GGUF format description (not Tessera's writer):
v3 header, metadata, tensor infos, data aligned to 32. Each model has hidden 8,
vocab 4, one layer, 2 experts of width 4 (stacked 3-D ffn_*_exps tensors), so
the files stay ~1-2 KB. Run from the repository root:

    /usr/bin/python3 tests/fuzz/make_moe_gguf_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")
U32, F32, BOOL, STR = 4, 6, 7, 8


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    body = {U32: lambda v: struct.pack("<I", v), F32: lambda v: struct.pack("<f", v),
            BOOL: lambda v: struct.pack("<?", v), STR: s}[vtype](value)
    return s(key) + struct.pack("<I", vtype) + body


def gguf(metadata, tensors):
    """metadata: [(key, type, value)]; tensors: [(name, ne)] all F32, zero-filled."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    out += b"".join(kv(*m) for m in metadata)
    offset, infos = 0, b""
    for name, ne in tensors:
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", 0, offset)  # type 0 = F32
        n = 4
        for d in ne:
            n *= d
        offset += (n + 31) // 32 * 32
    out += infos
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * offset


def model(arch, extra_meta, layer_tensors):
    p = arch + "."
    meta = [("general.architecture", STR, arch), (p + "block_count", U32, 1), (p + "context_length", U32, 64),
            (p + "embedding_length", U32, 8), (p + "feed_forward_length", U32, 4),
            (p + "attention.head_count", U32, 2), (p + "attention.head_count_kv", U32, 1),
            (p + "attention.layer_norm_rms_epsilon", F32, 1e-6)] + [(p + k, t, v) for k, t, v in extra_meta]
    tensors = [("token_embd.weight", [8, 4])] + [("blk.0." + n, ne) for n, ne in layer_tensors]
    return gguf(meta, tensors)


EXPS = [("ffn_gate_inp.weight", [8, 2]), ("ffn_gate_exps.weight", [8, 4, 2]),
        ("ffn_up_exps.weight", [8, 4, 2]), ("ffn_down_exps.weight", [4, 8, 2])]
SHEXP = [("ffn_gate_shexp.weight", [8, 4]), ("ffn_up_shexp.weight", [8, 4]), ("ffn_down_shexp.weight", [4, 8]),
         ("ffn_gate_inp_shexp.weight", [8])]
MOE = [("expert_count", U32, 2), ("expert_used_count", U32, 1), ("expert_feed_forward_length", U32, 4)]

SEEDS = {
    "valid_moe_mixtral": model("llama", [("expert_count", U32, 2), ("expert_used_count", U32, 1)], EXPS),
    "valid_moe_qwen2moe": model("qwen2moe", MOE + [("expert_shared_feed_forward_length", U32, 4),
                                                   ("expert_weights_norm", BOOL, False)], EXPS + SHEXP),
    "valid_moe_qwen3moe": model("qwen3moe", MOE + [("expert_weights_norm", BOOL, True)], EXPS),
    "bad_moe_used_over_count": model("qwen3moe", [("expert_count", U32, 2), ("expert_used_count", U32, 3),
                                                  ("expert_feed_forward_length", U32, 4)], EXPS),
    "bad_moe_no_router": model("qwen3moe", MOE, EXPS[1:]),
}

if __name__ == "__main__":
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")
