#!/usr/bin/python3
"""Bounded work per request (docs/architecture.md, "Time-bounded steps"): work bombs of
each constraint kind and long-prompt prompt_logprobs, on HTTP and gRPC.

    /usr/bin/python3 tests/e2e/test_bounded_work.py --tessera build/tessera [--keep]

A ~40-byte constraint made of nested counted repetition of an optional item (a regex,
the same in GBNF, a JSON Schema `pattern`, a tool's parameter schema) is a 400 naming
the field the request used, within 2 s, while a small request sent meanwhile answers
within 1 s. `prompt_logprobs` on a prompt long for the tiny model answers within a
bound number of entries (--max-prompt-logprobs-entries) and is computed inside the
time-bounded steps, so a concurrent small request still answers within 1 s; past the
bound it is a 400 naming `prompt_logprobs`. Uses the tiny synthetic model; gRPC calls
go through the real @grpc/grpc-js client (tests/e2e/grpc_call.mjs).
"""
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Results, Server, chat, cleanup, complete, e2e_args, error_check,  # noqa: E402
                        grpc_calls, synth_model)

ANSWER_S = 2.0      # the bomb's 400 (or the long answer)
SMALL_S = 1.0       # a small request sent meanwhile
ENTRIES = 2100      # --max-prompt-logprobs-entries (each row: a log-softmax and top-k over 152k tokens)
BOMB = "((a?){1,30}){1,30}"
BOMB_GBNF = 'root ::= (("a"?){1,30}){1,30}'
PATTERN_SCHEMA = {"type": "object", "properties": {"p": {"type": "string", "pattern": "^" + BOMB + "$"}},
                  "required": ["p"]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "pattern": BOMB}}, "required": ["q"]}}}]


def while_small_requests(port, fn):
    """Runs fn() on a thread while small requests go one after another; returns (fn's result, fn's
    seconds, the slowest small request's seconds)."""
    out = {}

    def run():
        t0 = time.monotonic()
        out["result"] = fn()
        out["took"] = time.monotonic() - t0
    t = threading.Thread(target=run)
    t.start()
    worst = 0.0
    n = 0
    while t.is_alive() or n == 0:
        t0 = time.monotonic()
        status, _, body = complete(port, prompt="hi", max_tokens=2, temperature=0)
        worst = max(worst, time.monotonic() - t0)
        assert status == 200, (status, body)
        n += 1
    t.join()
    return out["result"], out["took"], worst


def http_bombs(res, port):
    cases = [
        ("completions", {"structured_outputs": {"regex": BOMB}}, "structured_outputs.regex"),
        ("completions", {"guided_regex": BOMB}, "guided_regex"),
        ("completions", {"guided_grammar": BOMB_GBNF}, "guided_grammar"),
        ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PATTERN_SCHEMA}}},
         "response_format.json_schema.schema"),
        ("chat", {"tools": TOOLS, "tool_choice": "required"}, "tools"),
    ]
    for endpoint, body, param in cases:
        def check(endpoint=endpoint, body=body, param=param):
            def send():
                if endpoint == "chat":
                    return chat(port, messages=[{"role": "user", "content": "go"}], max_tokens=40, **body)
                return complete(port, prompt="Output:", max_tokens=40, **body)
            (status, _, out), took, worst = while_small_requests(port, send)
            err = error_check(status, out, 400, param=param)
            assert "too expensive" in err["message"], err
            assert took < ANSWER_S, f"the 400 took {took:.2f} s"
            assert worst < SMALL_S, f"a small request took {worst:.2f} s meanwhile"
        res.run(f"HTTP {param} work bomb -> 400 naming it fast; others unaffected", check)


def grpc_bombs(res, port, grpc_port, workdir):
    cases = [("guided_regex", BOMB), ("guided_grammar", BOMB_GBNF), ("guided_json", json.dumps(PATTERN_SCHEMA))]
    for field, value in cases:
        def check(field=field, value=value):
            call = {"target": f"127.0.0.1:{grpc_port}", "method": "Generate", "timed": True,
                    "request": {"text": {"text": "Output:"}, "params": {"max_tokens": 40, field: value}}}
            (result,), _, worst = while_small_requests(port, lambda: grpc_calls(workdir, [call]))
            assert result["code"] == 3, result  # INVALID_ARGUMENT
            assert field in result["details"] and "too expensive" in result["details"], result
            assert result["ms"] < ANSWER_S * 1000, f"the refusal took {result['ms']} ms"
            assert worst < SMALL_S, f"a small request took {worst:.2f} s meanwhile"
        res.run(f"gRPC {field} work bomb -> INVALID_ARGUMENT naming it fast; others unaffected", check)


def prompt_logprobs_checks(res, port):
    k = 20
    fits = ENTRIES // (k + 1) - 10  # tokens: just under the bound

    def long_prompt():
        prompt = [9707] * fits
        (status, _, out), took, worst = while_small_requests(
            port, lambda: complete(port, prompt=prompt, max_tokens=1, prompt_logprobs=k, temperature=0))
        assert status == 200, (status, str(out)[:300])
        lps = out["choices"][0]["prompt_logprobs"]
        assert len(lps) == fits and lps[0] is None and all(len(e) >= k for e in lps[1:]), len(lps)
        assert took < ANSWER_S, f"the answer took {took:.2f} s"
        assert worst < SMALL_S, f"a small request took {worst:.2f} s meanwhile"
        print(f"  {fits} prompt tokens x {k + 1}: answered in {took:.2f} s; small requests <= {worst:.2f} s",
              flush=True)
    res.run("prompt_logprobs on a long prompt: chunked in the steps, others unaffected", long_prompt)

    def over_bound():
        t0 = time.monotonic()
        status, _, out = complete(port, prompt=[9707] * 3000, max_tokens=1, prompt_logprobs=k)
        error_check(status, out, 400, param="prompt_logprobs")
        assert time.monotonic() - t0 < ANSWER_S
        status, _, out = complete(port, prompt=[9707] * 8, max_tokens=1, prompt_logprobs=21)
        error_check(status, out, 400, param="prompt_logprobs")  # over --max-logprobs
    res.run("prompt_logprobs past --max-prompt-logprobs-entries -> 400 naming it", over_bound)


def main():
    args = e2e_args(__doc__)
    workdir = tempfile.mkdtemp(prefix="tessera-e2e-bounded-")
    res = Results()
    start = time.time()
    srv = None
    try:
        model = synth_model(args.tessera, workdir)
        srv = Server(args.tessera, ["--model", model, "--max-model-len", "4096", "--tool-call-parser", "hermes",
                                    "--max-prompt-logprobs-entries", str(ENTRIES)], workdir, "bounded", grpc=True)
        res.server = srv
        if not res.run("server ready", srv.wait_ready):
            return res.summary(start)
        with open(srv.port_file) as f:
            grpc_port = json.load(f)["grpc"]
        # The first constrained request builds the vocabulary's byte trie (once per server): not the bombs' cost.

        def first_constrained():
            status, _, out = complete(srv.port, prompt="x", max_tokens=4, guided_regex="ab")
            assert status == 200 and out["choices"][0]["text"] == "ab", (status, out)
        res.run("a first constrained request (builds the vocabulary trie)", first_constrained)
        http_bombs(res, srv.port)
        grpc_bombs(res, srv.port, grpc_port, workdir)
        prompt_logprobs_checks(res, srv.port)
    finally:
        cleanup([srv] if srv else [], workdir, args.keep)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
