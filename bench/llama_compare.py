"""Reads the raw outputs of bench/lib_llama_compare.sh's lc_bench_pair (Tessera's
tessera-engine-bench JSON lines, llama-bench -o json, llama-batched-bench jsonl) and
formats the "Tessera / llama.cpp (ratio)" cells of RESULTS.md's same-file tables.
Imported by the table printers of run_moe_results.sh and run_quant_results.sh."""

import json
import os


def jsonl(path):
    """The JSON objects of the lines of `path` that start with '{' ([] if it is missing)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def llama_bench(path):
    """{'pp': tok/s, 'tg': tok/s} from llama-bench -o json (a list of test records)."""
    try:
        with open(path) as f:
            recs = json.load(f)
    except (OSError, ValueError):
        return {}
    res = {}
    for r in recs:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            res["pp"] = r["avg_ts"]
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            res["tg"] = r["avg_ts"]
    return res


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def machine_header(out):
    with open(os.path.join(out, "machine.txt")) as f:
        return f.read().rstrip()


class Pair:
    """Both engines' figures for one model name in `out` (lc_bench_pair's file names).
    model is None when the Tessera run failed; a missing llama.cpp figure is None."""

    def __init__(self, out, name):
        self.log = os.path.join(out, f"tessera-{name}.log")
        t = jsonl(os.path.join(out, f"tessera-{name}.jsonl"))
        self.model = next((l for l in t if l.get("phase") == "model"), None)
        pre = next((l for l in t if l.get("phase") == "prefill"), None)
        self.decode = {l["batch"]: l for l in t if l.get("phase") == "decode"}
        self.moe = next((l for l in t if l.get("phase") == "moe_expert_load"), None)
        self.t_pre = pre["tokens_per_s"] if pre else None
        d1, d16 = self.decode.get(1), self.decode.get(16)
        self.t1 = d1["tokens_per_s"] if d1 else None
        self.of_bw = d1["fraction_of_bandwidth"] if d1 else None
        self.t16 = d16["tokens_per_s"] if d16 else None
        lb = llama_bench(os.path.join(out, f"llama-{name}.json"))
        self.l_pre, self.l1 = lb.get("pp"), lb.get("tg")
        batched = {r.get("pl"): r for r in jsonl(os.path.join(out, f"llama-batched-{name}.jsonl"))}
        self.l16 = batched.get(16, {}).get("speed_tg")

    def cells(self):
        """[prefill, decode b1 (of bw), decode b16], each 'Tessera / llama.cpp (ratio)'."""
        return [f"{fmt(self.t_pre)} / {fmt(self.l_pre)} ({ratio(self.t_pre, self.l_pre)})",
                f"{fmt(self.t1)} ({fmt(self.of_bw, 2)} bw) / {fmt(self.l1)} ({ratio(self.t1, self.l1)})",
                f"{fmt(self.t16)} / {fmt(self.l16)} ({ratio(self.t16, self.l16)})"]


def table_row(cells):
    return "| " + " | ".join(cells) + " |"


def table_head(head):
    return table_row(head) + "\n|" + "---|" * len(head)
