// Oracle test of Tessera's GGUF writer and reader against Hugging Face's
// independent GGUF parser, @huggingface/gguf (from .deps/npm).
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_gguf_oracle.mjs --tessera build/tessera
//
// Synthesises tiny models with `tessera synth --format both|gguf` (bf16 qwen3,
// f16 llama, q8_0/q4_0/q4_k qwen3), parses each .gguf with @huggingface/gguf
// and checks that (1) every metadata key, type and value, every tensor's name,
// shape, GGML type and offset, and the data offset match what `tessera
// gguf-info --json` reports; (2) the tensors are the safetensors copy's under
// llama.cpp names with ne = the safetensors shape reversed. Prints one line per
// check and `N passed, M failed`; exits non-zero when anything failed.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const argv = process.argv.slice(2);
const argAt = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined; };
const tessera = path.resolve(argAt('--tessera') ?? 'build/tessera');
const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const npmDir = process.env.TESSERA_NPM_DIR ?? path.join(repo, '.deps/npm');
const require = createRequire(path.join(path.resolve(npmDir), 'node_modules/'));
const { gguf, GGUFValueType } = require('@huggingface/gguf');

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`PASS ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }

function run(args) {
  const p = spawnSync(tessera, ['--log-level', 'warn', ...args], {
    encoding: 'utf8', timeout: 300_000, maxBuffer: 256 << 20, env: { ...process.env, TESSERA_NPM_DIR: npmDir },
  });
  if (p.status !== 0) throw new Error(`tessera ${args.join(' ')} exited ${p.status}: ${p.stderr.slice(-2000)}`);
  return p.stdout;
}

const MAX_ARRAY = 64;
const TYPE_NAMES = ['uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'float32', 'bool', 'string', 'array',
  'uint64', 'int64', 'float64'];

// One metadata value of @huggingface/gguf (typed) against gguf-info's JSON.
function sameValue(key, type, hf, ours) {
  if (type === 'array') {
    assert(Array.isArray(hf), `${key}: oracle value is not an array`);
    assert(ours.length === hf.length, `${key}: length ${ours.length} != ${hf.length}`);
    const n = Math.min(hf.length, MAX_ARRAY);
    assert(ours.values.length === n, `${key}: ${ours.values.length} values printed, expected ${n}`);
    const et = ours.array_type;
    for (let i = 0; i < n; i++) sameValue(`${key}[${i}]`, et, hf[i], ours.values[i]);
    return;
  }
  if (type === 'float32') {
    assert(Math.fround(ours) === hf, `${key}: ${ours} != ${hf}`);
  } else if (type === 'uint64' || type === 'int64') {
    assert(BigInt(ours) === BigInt(hf), `${key}: ${ours} != ${hf}`);
  } else {
    assert(ours === hf, `${key}: ${JSON.stringify(ours)} != ${JSON.stringify(hf)}`);
  }
}

async function compareWithInfo(file) {
  const { metadata, typedMetadata, tensorInfos, tensorDataOffset } =
      await gguf(file, { allowLocalFile: true, typedMetadata: true });
  const info = JSON.parse(run(['gguf-info', file, '--json', '--max-array', String(MAX_ARRAY)]));
  assert(metadata.version === info.version, `version ${metadata.version} != ${info.version}`);
  assert(Number(metadata.tensor_count) === info.tensors.length, 'tensor_count');
  assert(Number(metadata.kv_count) === info.metadata.length, 'kv_count');
  assert(BigInt(info.data_offset) === tensorDataOffset, `data offset ${info.data_offset} != ${tensorDataOffset}`);
  for (const { key, type, value } of info.metadata) {
    const t = typedMetadata[key];
    assert(t !== undefined, `oracle has no key ${key}`);
    assert(TYPE_NAMES[t.type] === type, `${key}: type ${type} != ${TYPE_NAMES[t.type]}`);
    if (type === 'array') {
      assert(TYPE_NAMES[t.subType] === value.array_type, `${key}: element type ${value.array_type}`);
    }
    sameValue(key, type, t.value, value);
  }
  assert(tensorInfos.length === info.tensors.length, 'tensor count');
  tensorInfos.forEach((hf, i) => {
    const ours = info.tensors[i];
    assert(hf.name === ours.name, `tensor ${i}: ${hf.name} != ${ours.name}`);
    assert(hf.shape.length === ours.ne.length && hf.shape.every((d, j) => Number(d) === ours.ne[j]),
        `${hf.name}: shape ${hf.shape} != ${ours.ne}`);
    assert(hf.dtype === ours.type_id, `${hf.name}: dtype ${hf.dtype} != ${ours.type_id}`);
    assert(hf.offset === BigInt(ours.offset), `${hf.name}: offset ${hf.offset} != ${ours.offset}`);
  });
  return { metadata, tensorInfos };
}

// safetensors header: name -> {dtype, shape}
function safetensorsHeader(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const h = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  delete h.__metadata__;
  return h;
}

function ggufName(hf) {
  const fixed = { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight' };
  if (fixed[hf]) return fixed[hf];
  const m = hf.match(/^model\.layers\.(\d+)\.(.+)$/);
  const parts = { 'input_layernorm.weight': 'attn_norm.weight', 'post_attention_layernorm.weight': 'ffn_norm.weight',
    'self_attn.q_proj.weight': 'attn_q.weight', 'self_attn.k_proj.weight': 'attn_k.weight',
    'self_attn.v_proj.weight': 'attn_v.weight', 'self_attn.o_proj.weight': 'attn_output.weight',
    'self_attn.q_proj.bias': 'attn_q.bias', 'self_attn.k_proj.bias': 'attn_k.bias',
    'self_attn.v_proj.bias': 'attn_v.bias', 'self_attn.q_norm.weight': 'attn_q_norm.weight',
    'self_attn.k_norm.weight': 'attn_k_norm.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
    'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight' };
  assert(m && parts[m[2]], `unexpected tensor ${hf}`);
  return `blk.${m[1]}.${parts[m[2]]}`;
}

const GGML = { F32: 0, F16: 1, BF16: 30, Q8_0: 8, Q4_0: 2, Q4_K: 12 };

function compareWithSafetensors(dir, tensorInfos, metadata, arch, ggmlType) {
  const st = safetensorsHeader(path.join(dir, 'model.safetensors'));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const byName = new Map(tensorInfos.map((t) => [t.name, t]));
  assert(byName.size === Object.keys(st).length, `${byName.size} gguf tensors, ${Object.keys(st).length} safetensors`);
  for (const [name, { shape }] of Object.entries(st)) {
    const t = byName.get(ggufName(name));
    assert(t, `no gguf tensor for ${name}`);
    const ne = t.shape.map(Number);
    assert(JSON.stringify(ne) === JSON.stringify([...shape].reverse()), `${name}: ne ${ne} vs shape ${shape}`);
    // Vectors (norms, biases) are F32 in every file, as llama.cpp's convert_hf_to_gguf.py writes them.
    const want = shape.length === 1 ? GGML.F32 : ggmlType;
    assert(t.dtype === want, `${name}: dtype ${t.dtype}, expected ${want}`);
  }
  assert(metadata['general.architecture'] === arch, 'architecture');
  assert(metadata[`${arch}.block_count`] === cfg.num_hidden_layers, 'block_count');
  assert(metadata[`${arch}.embedding_length`] === cfg.hidden_size, 'embedding_length');
  assert(metadata[`${arch}.attention.head_count_kv`] === cfg.num_key_value_heads, 'head_count_kv');
  const tok = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const tokens = metadata['tokenizer.ggml.tokens'];
  for (const [text, id] of Object.entries(tok.model.vocab).slice(0, 5000)) assert(tokens[id] === text, `token ${id}`);
  for (const a of tok.added_tokens) assert(tokens[a.id] === a.content, `added token ${a.id}`);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-gguf-oracle-'));
try {
  const models = [
    { arch: 'qwen3', ggufArch: 'qwen3', dtype: 'bf16', type: GGML.BF16 },
    { arch: 'llama', ggufArch: 'llama', dtype: 'f16', type: GGML.F16 },
    { arch: 'qwen3', ggufArch: 'qwen3', dtype: 'q8_0', type: GGML.Q8_0 },
    { arch: 'qwen2', ggufArch: 'qwen2', dtype: 'q4_0', type: GGML.Q4_0 },
  ];
  for (const m of models) {
    const dir = path.join(tmp, `${m.arch}_${m.dtype}`);
    run(['synth', '--arch', m.arch, '--size', 'tiny', '--dtype', m.dtype, '--format', 'both', '--out', dir]);
    let parsed;
    await check(`${m.arch} ${m.dtype}: @huggingface/gguf agrees with tessera gguf-info`, async () => {
      parsed = await compareWithInfo(`${dir}.gguf`);
    });
    await check(`${m.arch} ${m.dtype}: gguf tensors and metadata mirror the safetensors copy`, async () => {
      assert(parsed, 'parse failed');
      compareWithSafetensors(dir, parsed.tensorInfos, parsed.metadata, m.ggufArch, m.type);
    });
  }
  await check('q4_k (256-wide rows): types and offsets agree', async () => {
    const file = path.join(tmp, 'q4k.gguf');
    run(['synth', '--arch', 'qwen3', '--size', 'tiny', '--dtype', 'q4_k', '--format', 'gguf', '--out', file,
      '--set', 'hidden_size=256', '--set', 'intermediate_size=512', '--set', 'head_dim=64']);
    const { tensorInfos } = await compareWithInfo(file);
    const q4k = tensorInfos.filter((t) => t.dtype === GGML.Q4_K).length;
    assert(q4k >= 14, `only ${q4k} Q4_K tensors`);
  });
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
