"""Structured outputs end to end: a random-weight model under a constraint is the fuzzer.

A `tessera serve` on the tiny synthetic Qwen3 model answers constrained requests
(response_format json_schema / json_object, structured_outputs, guided_*) on both
endpoints. Every output that ends with finish_reason "stop" must be valid under an
oracle independent of Tessera: ajv (npm, draft 2020-12 + ajv-formats) for JSON
Schemas, Python's re.fullmatch for regexes, membership for choices, and for the
GBNF files in tests/data/grammars Python's json module, a recursive-descent
arithmetic reader and a regular expression. Outputs cut by max_tokens end with
"length". An unconstrained greedy request batched with constrained ones produces
bitwise the same tokens and logprobs as alone. Bad constraints are 400s naming the
field, never 500s or hangs.

    /usr/bin/python3 tests/e2e/test_structured_outputs.py --tessera build/tessera
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, chat, complete, error_check, stream_events, synth_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM_DIR = os.environ.get("TESSERA_NPM_DIR", os.path.join(ROOT, ".deps/npm"))
GRAMMARS = os.path.join(ROOT, "tests/data/grammars")
MAX_TOKENS = 160

HAND_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 130}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "null"}}, "required": ["ok"]},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 1234}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "size": {"const": 3}},
     "required": ["color", "size"]},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                      "at": {"type": "string", "format": "time"},
                                      "id": {"type": "string", "format": "uuid"}},
     "required": ["when", "at", "id"]},
    {"type": "object", "properties": {"stamp": {"type": "string", "format": "date-time"},
                                      "mail": {"type": "string", "format": "email"},
                                      "ip": {"type": "string", "format": "ipv4"}},
     "required": ["stamp", "ip"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                      "tag": {"type": "string", "pattern": "ab+c"}},
     "required": ["code", "tag"]},
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                         "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
     "required": ["a"]},
    {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}]},
    {"oneOf": [{"type": "boolean"}, {"type": "array", "maxItems": 2, "items": {"type": "string", "minLength": 1,
                                                                                "maxLength": 3}}]},
    {"type": "array", "prefixItems": [{"type": "string", "maxLength": 4}, {"type": "integer"}], "items": False},
    {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"opt1": {"type": "integer"}, "opt2": {"type": "string", "maxLength": 3},
                                      "opt3": {"type": "boolean"}}},
    {"type": ["string", "null"], "maxLength": 6},
    {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"],
     "$defs": {"node": {"type": "object", "properties": {
         "v": {"type": "integer", "minimum": 0, "maximum": 9},
         "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}},
    {"type": "number", "minimum": 0},
    {"type": "string", "minLength": 2, "maxLength": 8},
    {"type": "object", "properties": {"unicode": {"enum": ["caf\u00e9", "\u65e5\u672c", "\U0001F600"]}},
     "required": ["unicode"]},
    True,
    {},
]


def gen_schema(rng, depth=0):
    """A random schema from the supported subset (bounded depth and size)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum"] + (["object", "array", "anyof"] if depth < 3 else [])
    k = rng.choice(kinds)
    if k == "string":
        s = {"type": "string"}
        r = rng.random()
        if r < 0.3:
            s["maxLength"] = rng.randint(0, 8)
            s["minLength"] = rng.randint(0, s["maxLength"])
        elif r < 0.45:
            s["format"] = rng.choice(["date", "time", "date-time", "uuid", "email", "ipv4"])
        elif r < 0.6:
            s["pattern"] = rng.choice(["^[a-f0-9]{4}$", "^x+y?$", "^(yes|no)$", "^[A-Z][a-z]{0,5}$", "q"])
        else:
            s["maxLength"] = rng.randint(1, 10)
        return s
    if k == "integer":
        s = {"type": "integer"}
        if rng.random() < 0.6:
            lo = rng.randint(-1000, 1000)
            s["minimum"] = lo
            if rng.random() < 0.7:
                s["maximum"] = lo + rng.randint(0, 5000)
        return s
    if k == "number":
        return {"type": "number"} if rng.random() < 0.7 else {"type": "number", "minimum": 0}
    if k in ("boolean", "null"):
        return {"type": k}
    if k == "enum":
        vals = rng.sample(["a", "bb", 1, 2.5, True, None, "x y", {"k": 1}, [1, 2]], rng.randint(1, 4))
        return {"enum": vals}
    if k == "object":
        props = {f"p{i}_{rng.randint(0, 99)}": gen_schema(rng, depth + 1) for i in range(rng.randint(0, 4))}
        s = {"type": "object", "properties": props}
        req = [p for p in props if rng.random() < 0.6]
        if req:
            s["required"] = req
        r = rng.random()
        if r < 0.2:
            s["additionalProperties"] = False
        elif r < 0.3:
            s["additionalProperties"] = gen_schema(rng, depth + 1)
        return s
    if k == "array":
        s = {"type": "array", "items": gen_schema(rng, depth + 1)}
        lo = rng.randint(0, 2)
        s["minItems"] = lo
        s["maxItems"] = lo + rng.randint(0, 3)
        return s
    # anyOf / oneOf whose branches exclude each other (distinct types, or objects told apart by a
    # required "kind"), so ajv's oneOf (exactly one) holds; overlapping oneOf: gen_overlapping_oneof
    if rng.random() < 0.3:
        branches = [{"type": "object", "properties": {"kind": {"const": c}, "v": gen_schema(rng, depth + 1)},
                     "required": ["kind"]} for c in ("a", "b")]
    else:
        types = rng.sample(["string", "boolean", "null", "array"], 2)
        branches = [{"type": t, "maxItems": 2} if t == "array" else {"type": t} for t in types]
    return {rng.choice(["anyOf", "oneOf"]): branches}


OVERLAPPING = [
    [{"type": "string"}, {"type": "string", "maxLength": 3}],
    [{"type": "integer"}, {"type": "number"}],
    [{"type": "object", "properties": {"a": {"type": "integer"}}},
     {"type": "object", "properties": {"b": {"type": "boolean"}}}],
    [{"enum": ["x", 1]}, {"const": 1}],
    [{"type": "boolean"}, {}],
    [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
     {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "null"}}, "required": ["kind"]}],
]


def gen_overlapping_oneof(rng):
    """A generated schema with a oneOf whose branches can both match one value somewhere inside: a grammar
    cannot enforce exactly-one there, so the server must refuse it (before: enforced as anyOf)."""
    inner = {"oneOf": [dict(b) for b in rng.choice(OVERLAPPING)]}
    for _ in range(rng.randint(0, 2)):
        if rng.random() < 0.5:
            inner = {"type": "array", "items": inner, "maxItems": 3}
        else:
            other = gen_schema(rng, 3)
            inner = {"type": "object", "properties": {"x": other, "y": inner}, "required": ["y"]}
    return inner


def ajv_check(cases):
    """[(schema, text)] -> [(ok, error)] through tests/e2e/ajv_validate.mjs."""
    payload = json.dumps([{"schema": s, "text": t} for s, t in cases])
    out = subprocess.run(["node", os.path.join(ROOT, "tests/e2e/ajv_validate.mjs")], input=payload.encode(),
                         capture_output=True, timeout=60, env=dict(os.environ, TESSERA_NPM_DIR=NPM_DIR))
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return [(r["ok"], r["error"]) for r in json.loads(out.stdout)]


def parallel(fns, workers=16):
    """Runs the callables on `workers` threads; returns their results in order."""
    results = [None] * len(fns)
    errors = []
    lock = threading.Lock()
    idx = iter(range(len(fns)))

    def worker():
        while True:
            with lock:
                i = next(idx, None)
            if i is None:
                return
            try:
                results[i] = fns[i]()
            except Exception as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    return results


def constrained(port, endpoint, constraint, seed, max_tokens=MAX_TOKENS, **extra):
    """One constrained request -> (text, finish_reason)."""
    body = dict(max_tokens=max_tokens, temperature=1.0, seed=seed, **constraint, **extra)
    if endpoint == "chat":
        status, _, out = chat(port, messages=[{"role": "user", "content": "Answer in the format."}], **body)
    else:
        status, _, out = complete(port, prompt="Output:", **body)
    assert status == 200, (status, out)
    c = out["choices"][0]
    text = c["message"]["content"] if endpoint == "chat" else c["text"]
    return text, c["finish_reason"]


def check_outputs(outputs, what):
    """outputs: [(text, finish)]; every finish is stop|length, and enough of them stop."""
    stops = sum(1 for _, f in outputs if f == "stop")
    for text, f in outputs:
        assert f in ("stop", "length"), (what, f, text[:200])
    assert stops >= len(outputs) // 3, f"{what}: only {stops}/{len(outputs)} outputs completed"
    return [(t, f) for t, f in outputs if f == "stop"]


def schema_checks(res, port):
    rng = random.Random(20261125)
    # Hundreds of schemas: the hand-written ones sampled twice, 180 generated ones once.
    schemas = list(HAND_SCHEMAS) + [gen_schema(rng) for _ in range(180)]
    runs = [(i, k) for i in range(len(schemas)) for k in range(2 if i < len(HAND_SCHEMAS) else 1)]
    forms = []
    for i, s in enumerate(schemas):
        r = i % 4
        if r == 0:
            forms.append(("completions", {"response_format": {"type": "json_schema",
                                                              "json_schema": {"name": "s", "schema": s,
                                                                              "strict": True}}}))
        elif r == 1:
            forms.append(("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": s}}}))
        elif r == 2:
            forms.append(("completions", {"structured_outputs": {"json": s}}))
        else:
            forms.append(("chat", {"guided_json": json.dumps(s)}))
    state = {}

    def generate():
        jobs = [lambda i=i, k=k: constrained(port, forms[i][0], forms[i][1], seed=1000 * i + k) for i, k in runs]
        state["out"] = parallel(jobs)
    if not res.run(f"{len(runs)} completions under {len(schemas)} JSON Schemas -> 200", generate):
        return

    def validate():
        cases, where = [], []
        for j, (text, finish) in enumerate(state["out"]):
            assert finish in ("stop", "length"), (finish, text[:200])
            if finish == "stop":
                cases.append((schemas[runs[j][0]], text))
                where.append(j)
        assert len(cases) >= len(state["out"]) // 2, f"only {len(cases)}/{len(state['out'])} documents completed"
        bad = [(schemas[runs[where[n]][0]], cases[n][1], err) for n, (ok, err) in enumerate(ajv_check(cases)) if not ok]
        assert not bad, f"{len(bad)} invalid of {len(cases)}: " + json.dumps(bad[:3])[:3000]
        print(f"  {len(cases)} complete documents valid under ajv; "
              f"{len(state['out']) - len(cases)} cut by max_tokens", flush=True)
    res.run("every completed document validates (ajv)", validate)

    def json_object():
        outs = parallel([lambda s=s: constrained(port, "chat" if s % 2 else "completions",
                                                 {"response_format": {"type": "json_object"}}, seed=s)
                         for s in range(8)])
        for text, _ in check_outputs(outs, "json_object"):
            assert isinstance(json.loads(text), dict), text[:200]
    res.run("response_format json_object -> JSON objects", json_object)

    def streaming():
        schema = HAND_SCHEMAS[0]
        body = {"prompt": "x", "max_tokens": MAX_TOKENS, "seed": 7, "stream": True,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
        status, _, events, done = stream_events(port, "/v1/completions", body)
        assert status == 200 and done, (status, events[:1])
        text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
        finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
        assert finish in (["stop"], ["length"]), finish
        if finish == ["stop"]:
            assert ajv_check([(schema, text)])[0][0], text
    res.run("streaming json_schema: the concatenated deltas validate", streaming)


REGEXES = [r"[a-z]{3,8}@(foo|bar)\.com", r"\d{3}-\d{4}", r"(ab|cd)*e", r"[A-Z][a-z]+( [A-Z][a-z]+){0,2}",
           r"-?(0|[1-9]\d{0,5})(\.\d{1,3})?", r"\w{1,5}\s\W", r"[^a-z\n]{2,6}", r"(?:yes|no|maybe)!?",
           r"\u00e9{1,3}[\u4e00-\u4e0f]", r"x{2}y{0,3}z?", r"[\x20-\x7e]{1,12}\."]


def regex_checks(res, port):
    def regex():
        jobs = [lambda p=p, s=s: (p, constrained(port, "completions" if s % 2 else "chat",
                                                 {"guided_regex": p} if s % 2 else {"structured_outputs": {"regex": p}},
                                                 seed=s))
                for p in REGEXES for s in range(3)]
        outs = parallel(jobs)
        done = check_outputs([o for _, o in outs], "regex")
        assert done
        for p, (text, finish) in outs:
            if finish == "stop":
                assert re.fullmatch(p, text), (p, text)
    res.run(f"guided_regex / structured_outputs.regex over {len(REGEXES)} patterns: outputs fullmatch", regex)

    def choice():
        choices = ["alpha", "beta", "gamma delta", "\u00e9t\u00e9"]
        outs = parallel([lambda s=s: constrained(port, "chat" if s % 2 else "completions",
                                                 {"guided_choice": choices} if s % 2 else
                                                 {"structured_outputs": {"choice": choices}}, seed=s)
                         for s in range(8)])
        for text, finish in outs:
            assert finish == "stop" and text in choices, (text, finish)
        status, _, out = complete(port, prompt="x", max_tokens=8, n=3, seed=5, guided_choice=choices)
        assert status == 200, out
        assert all(c["text"] in choices and c["finish_reason"] == "stop" for c in out["choices"]), out
    res.run("guided_choice (n=1 and n=3): exactly one of the choices, finish stop", choice)

    def length_cut():
        text, finish = constrained(port, "completions", {"guided_regex": "a{50}"}, seed=1, max_tokens=3)
        assert finish == "length" and re.fullmatch("a*", text), (text, finish)
    res.run("a constraint longer than max_tokens ends with finish_reason length", length_cut)


def read_arithmetic(text):
    """Independent recursive-descent reader for tests/data/grammars/arithmetic.gbnf."""
    pos = 0

    def ws():
        nonlocal pos
        while pos < len(text) and text[pos] in " \t":
            pos += 1

    def term():
        nonlocal pos
        if pos < len(text) and text[pos] == "(":
            pos += 1
            ws()
            expr()
            assert text[pos] == ")", text
            pos += 1
            ws()
            return
        m = re.compile(r"[a-z][a-z0-9_]*|[0-9]+").match(text, pos)
        assert m, (text, pos)
        pos = m.end()
        ws()

    def expr():
        nonlocal pos
        term()
        while pos < len(text) and text[pos] in "-+*/":
            pos += 1
            term()
    lines = 0
    while pos < len(text):
        expr()
        assert text[pos] == "=", (text, pos)
        pos += 1
        ws()
        term()
        assert text[pos] == "\n", (text, pos)
        pos += 1
        lines += 1
    assert lines >= 1


def gbnf_checks(res, port):
    def read(name):
        with open(os.path.join(GRAMMARS, name), encoding="utf-8") as f:
            return f.read()
    checks = {
        "json.gbnf": lambda t: isinstance(json.loads(t), dict),
        "arithmetic.gbnf": lambda t: read_arithmetic(t) is None,
        "list.gbnf": lambda t: re.fullmatch(r"(- [^\r\n\x0b\x0c\x85\u2028\u2029]{1,40}\n){1,8}", t) is not None,
    }
    for name, check in checks.items():
        def run(name=name, check=check):
            grammar = read(name)
            outs = parallel([lambda s=s: constrained(port, "completions" if s % 2 else "chat",
                                                     {"guided_grammar": grammar} if s % 2 else
                                                     {"structured_outputs": {"grammar": grammar}}, seed=s)
                             for s in range(8)])
            for text, _ in check_outputs(outs, name):
                assert check(text), (name, text)
        res.run(f"guided_grammar {name}: outputs pass an independent parser", run)


def exactness_check(res, port):
    def exact():
        body = dict(prompt="The quick brown fox", max_tokens=48, temperature=0, logprobs=1)
        status, _, alone = complete(port, **body)
        assert status == 200, alone
        busy = threading.Event()

        def load():
            busy.set()
            return parallel([lambda s=s: constrained(port, "completions", {"guided_json": HAND_SCHEMAS[14]}, seed=s,
                                                     max_tokens=120) for s in range(6)], workers=6)
        t = threading.Thread(target=load)
        t.start()
        busy.wait(5)
        time.sleep(0.2)
        status, _, batched = complete(port, **body)
        t.join(120)
        assert status == 200, batched
        a, b = alone["choices"][0], batched["choices"][0]
        assert a["text"] == b["text"], (a["text"], b["text"])
        assert a["logprobs"]["token_logprobs"] == b["logprobs"]["token_logprobs"]
        assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
    res.run("unconstrained greedy request batched with constrained ones: bitwise the same tokens", exact)


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {"type": "string"}}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 5,
                                                                             "maximum": 1}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"guided_json": {"$ref": "#/$defs/missing"}}, "guided_json"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_regex": "(a*)*b"}, "guided_regex"),
    ({"guided_regex": "(a"}, "guided_regex"),
    ({"guided_regex": "a(?=b)"}, "guided_regex"),
    ({"guided_regex": "x{99999}"}, "guided_regex"),
    ({"guided_grammar": "root ::= root \"a\" | \"a\""}, "guided_grammar"),
    ({"guided_grammar": "root ::= undefined"}, "guided_grammar"),
    ({"guided_grammar": "root ::= [a-z]{1000}{1000}"}, "guided_grammar"),
    ({"guided_grammar": "root ::= " + " | ".join(f'"{i}"' for i in range(40000))}, "guided_grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "grammar": "root ::= \"a\""}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
        "type": "object", "properties": {"a": {"type": "array", "items": {"type": "array", "items": {
            "type": "array", "items": {"$ref": "#/properties/a"}}}}}, "$comment": "x" * 100000}}}},
     "response_format.json_schema.schema"),
]


def bad_input_checks(res, port):
    def bad():
        deep = {"type": "integer"}
        for _ in range(40):
            deep = {"type": "array", "items": deep}
        cases = BAD + [({"guided_json": deep}, "guided_json")]
        for body, param in cases:
            for endpoint in ("completions", "chat"):
                t0 = time.time()
                if endpoint == "chat":
                    status, _, out = chat(port, messages=[{"role": "user", "content": "x"}], max_tokens=4, **body)
                else:
                    status, _, out = complete(port, prompt="x", max_tokens=4, **body)
                error_check(status, out, 400, param=param)
                assert time.time() - t0 < 5, (body, time.time() - t0)
    res.run("invalid, unsatisfiable, catastrophic or huge constraints -> 400 naming the field, fast", bad)

    def overlapping_oneof():
        rng = random.Random(20261127)
        for i in range(18):
            schema = gen_overlapping_oneof(rng)
            if i % 3 == 0:
                body, param = {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}, \
                    "response_format.json_schema.schema"
            elif i % 3 == 1:
                body, param = {"structured_outputs": {"json": schema}}, "structured_outputs.json"
            else:
                body, param = {"guided_json": json.dumps(schema)}, "guided_json"
            status, _, out = complete(port, prompt="x", max_tokens=4, **body)
            err = error_check(status, out, 400, param=param)
            assert "'oneOf' branches" in err["message"], (schema, err)
    res.run("oneOf with branches that can overlap (generated) -> 400 naming the field", overlapping_oneof)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-structured-")
    res = Results()
    start = time.time()
    srv = None
    try:
        model = synth_model(tessera, workdir)
        srv = Server(tessera, ["--model", model, "--max-num-seqs", "32"], workdir, "structured")
        res.server = srv
        if not res.run("server ready", srv.wait_ready):
            return res.summary(start)
        port = srv.port
        bad_input_checks(res, port)
        schema_checks(res, port)
        regex_checks(res, port)
        gbnf_checks(res, port)
        exactness_check(res, port)
    finally:
        if srv is not None:
            srv.stop()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
