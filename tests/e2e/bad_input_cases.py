"""Loads tests/e2e/bad_input_cases.json: the bad-input cases both front ends must refuse alike.

Not a test itself. test_bad_input.py sends each case over HTTP; test_grpc_bad_input.mjs
(its own loader, same rules) sends each case that the proto can express through gRPC.

    for case in load():   # dicts: group, endpoint, path, name, body, param, statuses
        ...
"""
import copy
import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_input_cases.json")
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def expand(v):
    """Replaces the file's generators ({"$strings": N}, {"$bias": N}, {"$repeat": [X, N]}) by their values."""
    if isinstance(v, dict):
        if "$strings" in v:
            return [f"s{i}" for i in range(v["$strings"])]
        if "$bias" in v:
            return {str(i): 1 for i in range(v["$bias"])}
        if "$repeat" in v:
            item, n = v["$repeat"]
            return [copy.deepcopy(item) for _ in range(n)]
        return {k: expand(x) for k, x in v.items()}
    if isinstance(v, list):
        return [expand(x) for x in v]
    return v


def short(v, n=60):
    s = json.dumps(v)
    return s if len(s) <= n else s[:n - 3] + "..."


def load(path=PATH):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    out = []
    for t in doc["tables"]:
        for v in t["values"]:
            body = dict(copy.deepcopy(doc["bases"][t["endpoint"]]), **t.get("extra", {}))
            body[t["field"]] = expand(v)
            out.append({"group": t["group"], "endpoint": t["endpoint"], "path": PATHS[t["endpoint"]],
                        "name": f"{t['field']} = {short(v)}", "table": f"{t['endpoint']} {t['field']}",
                        "body": body, "param": t.get("param", t["field"]), "statuses": [400]})
    for c in doc["cases"]:
        body = dict(copy.deepcopy(doc["bases"][c["endpoint"]]), **expand(c["patch"]))
        out.append({"group": c["group"], "endpoint": c["endpoint"], "path": PATHS[c["endpoint"]],
                    "name": c.get("name", short(c["patch"])), "table": None, "body": body, "param": c["param"],
                    "statuses": c.get("statuses", [400])})
    return out
