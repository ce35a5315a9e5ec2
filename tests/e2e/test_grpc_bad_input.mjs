// The HTTP suite's bad-input cases (tests/e2e/bad_input_cases.json, shared
// with test_bad_input.py) sent through gRPC too, with the real @grpc/grpc-js
// client: both front ends must validate alike.
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_grpc_bad_input.mjs --tessera build/tessera [--keep]
//
// Starts `tessera serve` (tiny synthetic qwen3, HTTP and gRPC ports). For every
// case the proto can express (a JSON-type error such as "temperature": "x" has
// no proto form; those are counted, by reason), it sends the HTTP body and the
// equivalent GenerateRequest: HTTP must refuse it (400 naming the case's
// param), and gRPC must refuse it with INVALID_ARGUMENT (OUT_OF_RANGE for
// context_length_exceeded) whose message quotes the same param; a body over
// --max-body-bytes (413) is a message over gRPC's size limit (RESOURCE_EXHAUSTED). Prints one
// line per check and `N passed, M failed`. Bounded in time.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TOTAL_TIMEOUT_MS = 300_000;
const READY_TIMEOUT_MS = 60_000;
const EXIT_TIMEOUT_MS = 15_000;
const CALL_TIMEOUT_MS = 30_000;
const I32_MIN = -(2 ** 31);
const I32_MAX = 2 ** 31 - 1;

const argv = process.argv.slice(2);
const argAt = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined; };
const tessera = path.resolve(argAt('--tessera') ?? 'build/tessera');
const keep = argv.includes('--keep');
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const npmDir = process.env.TESSERA_NPM_DIR ?? path.join(repo, '.deps/npm');
const require = createRequire(path.join(path.resolve(npmDir), 'node_modules/'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

let passed = 0;
let failed = 0;
let server = null;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera_grpc_bad_'));

function assert(cond, msg) { if (!cond) throw new Error(msg); }
async function check(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`PASS ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e && e.message ? e.message : e}`);
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function stopServer() {
  if (!server || server.exitCode !== null || server.signalCode !== null) return null;
  const exited = new Promise((r) => server.once('exit', (code, sig) => r({ code, sig })));
  server.kill('SIGTERM');
  const res = await Promise.race([exited, sleep(EXIT_TIMEOUT_MS).then(() => null)]);
  if (res === null) {
    server.kill('SIGKILL');
    await exited;
  }
  return res;
}

async function finish(code) {
  await stopServer().catch(() => {});
  if (!keep) fs.rmSync(work, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(code);
}
const totalTimer = setTimeout(() => { console.log('FAIL timeout: the test ran too long'); failed += 1; finish(1); },
  TOTAL_TIMEOUT_MS);
totalTimer.unref();

// --- the shared cases (same expansion rules as bad_input_cases.py) ---
function expand(v) {
  if (Array.isArray(v)) return v.map(expand);
  if (v !== null && typeof v === 'object') {
    if ('$strings' in v) return Array.from({ length: v.$strings }, (_, i) => `s${i}`);
    if ('$bias' in v) return Object.fromEntries(Array.from({ length: v.$bias }, (_, i) => [String(i), 1]));
    if ('$repeat' in v) return Array.from({ length: v.$repeat[1] }, () => structuredClone(v.$repeat[0]));
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, expand(x)]));
  }
  return v;
}
const short = (v, n = 60) => { const s = JSON.stringify(v); return s.length <= n ? s : `${s.slice(0, n - 3)}...`; };

function loadCases() {
  const doc = JSON.parse(fs.readFileSync(path.join(here, 'bad_input_cases.json'), 'utf8'));
  const out = [];
  for (const t of doc.tables) {
    for (const v of t.values) {
      const body = { ...structuredClone(doc.bases[t.endpoint]), ...(t.extra ?? {}) };
      body[t.field] = expand(v);
      out.push({ group: t.group, endpoint: t.endpoint, name: `${t.endpoint} ${t.field} = ${short(v)}`, body,
        param: t.param ?? t.field, statuses: [400] });
    }
  }
  for (const c of doc.cases) {
    const body = { ...structuredClone(doc.bases[c.endpoint]), ...expand(c.patch) };
    out.push({ group: c.group, endpoint: c.endpoint, name: `${c.endpoint} ${c.name ?? short(c.patch)}`, body,
      param: c.param, statuses: c.statuses ?? [400] });
  }
  return { doc, cases: out };
}

// --- an HTTP body as the equivalent GenerateRequest, or {why} when the proto cannot say it ---
const isI32 = (v) => Number.isInteger(v) && v >= I32_MIN && v <= I32_MAX;
const isBool = (v) => typeof v === 'boolean';
const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

function toProto(endpoint, body, servedName) {
  const req = { params: {} };
  const p = req.params;
  const no = (why) => ({ why });
  for (const [key, v] of Object.entries(body)) {
    if (v === null) return no(`${key}: null (proto: unset is the default, not null)`);
    switch (key) {
      case 'model':
        if (v !== servedName) return no('model: no proto field (one model per server)');
        break;
      case 'prompt':
        if (endpoint !== 'completions') return no('prompt on chat');
        if (typeof v === 'string') req.text = { text: v, ...(req.text ?? {}) };
        else if (Array.isArray(v) && v.every(isI32)) req.token_ids = { ids: v };
        else return no('prompt: not a string or a list of int32 ids');
        break;
      case 'add_special_tokens':
        if (!isBool(v) || typeof body.prompt !== 'string') return no('add_special_tokens: not a boolean on a text prompt');
        break;
      case 'messages': {
        if (endpoint !== 'chat' || !Array.isArray(v)) return no('messages: not an array');
        const messages = [];
        for (const m of v) {
          if (m === null || typeof m !== 'object' || Array.isArray(m)) return no('messages[i]: not an object');
          if (Object.keys(m).some((k) => k !== 'role' && k !== 'content')) return no('messages[i]: fields beyond role/content');
          // proto3 has no "absent" string: a missing role is "", as the proto would carry it.
          if (m.role !== undefined && typeof m.role !== 'string') return no('messages[i].role: not a string');
          if (typeof m.content !== 'string') return no('messages[i].content: not a string (absent is "" in proto, which is valid)');
          messages.push({ role: m.role ?? '', content: m.content });
        }
        req.chat = { messages };
        break;
      }
      case 'add_generation_prompt':
        if (!isBool(v)) return no(`${key}: not a boolean`);
        break;
      case 'max_tokens': case 'min_tokens': case 'top_k': case 'n':
        if (!isI32(v)) return no(`${key}: not an int32`);
        p[key] = v;
        break;
      case 'temperature': case 'top_p': case 'min_p': case 'presence_penalty': case 'frequency_penalty':
      case 'repetition_penalty':
        if (!isNum(v)) return no(`${key}: not a number`);
        p[key] = v;
        break;
      case 'seed':
        if (!Number.isSafeInteger(v) || v < 0) return no('seed: not a uint64');
        p.seed = v;
        break;
      case 'stop':
        if (typeof v === 'string') p.stop = [v];
        else if (Array.isArray(v) && v.every((s) => typeof s === 'string')) p.stop = v;
        else return no('stop: not a string or a list of strings');
        break;
      case 'stop_token_ids':
        if (!Array.isArray(v) || !v.every(isI32)) return no('stop_token_ids: not a list of int32');
        p.stop_token_ids = v;
        break;
      case 'ignore_eos': case 'skip_special_tokens': case 'include_stop_str_in_output':
        if (!isBool(v)) return no(`${key}: not a boolean`);
        p[key] = v;
        break;
      case 'logprobs':
        if (endpoint === 'chat') {
          if (!isBool(v)) return no('logprobs: not a boolean');
          p.logprobs = v;
        } else {  // completions: logprobs=k is logprobs + top_logprobs=k
          if (!isI32(v)) return no('logprobs: not an int32');
          p.logprobs = true;
          p.top_logprobs = v;
        }
        break;
      case 'top_logprobs':
        if (endpoint !== 'chat' || !isI32(v)) return no('top_logprobs: not an int32 on chat');
        p.top_logprobs = v;
        break;
      case 'logit_bias': {
        if (v === null || typeof v !== 'object' || Array.isArray(v)) return no('logit_bias: not an object');
        const bias = {};
        for (const [k, b] of Object.entries(v)) {
          if (!isI32(Number(k)) || String(Number(k)) !== k || !isNum(b)) return no('logit_bias: not int32 -> number');
          bias[k] = b;
        }
        p.logit_bias = bias;
        break;
      }
      case 'stream':
        if (!isBool(v)) return no('stream: not a boolean');  // a boolean picks Generate or GenerateStream
        break;
      default:
        return no(`${key}: no proto field`);
    }
  }
  if (body.add_special_tokens !== undefined) req.text.add_special_tokens = body.add_special_tokens;
  if (body.add_generation_prompt !== undefined) req.chat.add_generation_prompt = body.add_generation_prompt;
  return { req };
}

const unary = (client, req) => new Promise((resolve) => {
  client.Generate(req, new grpc.Metadata(), { deadline: new Date(Date.now() + CALL_TIMEOUT_MS) },
    (err, resp) => resolve({ err, resp }));
});

async function postJson(httpPort, endpoint, body) {
  const url = `http://127.0.0.1:${httpPort}/v1/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`;
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  let json = null;
  try { json = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json };
}

async function main() {
  const { doc, cases } = loadCases();
  const model = path.join(work, 'model');
  const synth = spawnSync(tessera, ['synth', '--arch', 'qwen3', '--size', 'tiny', '--dtype', 'f32', '--out', model],
    { encoding: 'utf8', timeout: 120_000, env: { ...process.env, TESSERA_NPM_DIR: npmDir } });
  if (synth.status !== 0) {
    console.log(`FAIL synth: ${synth.stderr}`);
    failed += 1;
    return finish(1);
  }
  const portFile = path.join(work, 'ports.json');
  const logPath = path.join(work, 'serve.log');
  const log = fs.openSync(logPath, 'w');
  server = spawn(tessera, ['serve', '--model', model, '--served-model-name', doc.model, '--port', '0',
    '--grpc-port', '0', '--port-file', portFile, '--threads', '2',
    '--max-body-bytes', String(256 * 1024)],  // as test_bad_input.py: its (400, 413) cases get 413 fast
  { stdio: ['ignore', log, log] });
  let ports = null;
  let ready = false;
  const readyBy = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < readyBy && server.exitCode === null) {
    try { ports = JSON.parse(fs.readFileSync(portFile, 'utf8')); } catch { /* not yet */ }
    if (ports && ports.http > 0 && ports.grpc > 0) {
      try { ready = (await fetch(`http://127.0.0.1:${ports.http}/ready`)).status === 200; } catch { /* not yet */ }
      if (ready) break;
    }
    await sleep(100);
  }
  await check('server ready (port file + /ready)', () => {
    assert(ready, `not ready; log: ${fs.readFileSync(logPath, 'utf8').slice(-2000)}`);
  });
  if (!ready) return finish(1);

  const def = protoLoader.loadSync(['proto/tessera.proto'], {
    includeDirs: [repo], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const client = new pkg.tessera.v1.Tessera(`127.0.0.1:${ports.grpc}`, grpc.credentials.createInsecure(),
    { 'grpc.max_send_message_length': 64 << 20 });

  const skipped = {};
  const sent = {};
  const sentNames = new Set();
  const groups = [...new Set(cases.map((c) => c.group))];
  for (const group of groups) {
    const mine = cases.filter((c) => c.group === group);
    await check(`group ${group}: every proto-expressible case refused alike by HTTP and gRPC`, async () => {
      const bad = [];
      for (const c of mine) {
        const { req, why } = toProto(c.endpoint, c.body, doc.model);
        if (!req) {
          skipped[why] = (skipped[why] ?? 0) + 1;
          continue;
        }
        sent[group] = (sent[group] ?? 0) + 1;
        sentNames.add(c.name);
        const http = await postJson(ports.http, c.endpoint, c.body);
        const httpErr = http.json && http.json.error;
        if (!c.statuses.includes(http.status) || !httpErr) {
          bad.push(`${c.name}: HTTP ${http.status} ${short(http.json, 200)}`);
          continue;
        }
        if (http.status === 400 && httpErr.param !== c.param) {
          bad.push(`${c.name}: HTTP param ${httpErr.param}, want ${c.param}`);
        }
        const { err } = await unary(client, req);
        // 413 (over --max-body-bytes) is gRPC's message size limit: RESOURCE_EXHAUSTED, no field.
        const want = http.status === 413 ? grpc.status.RESOURCE_EXHAUSTED
          : httpErr.code === 'context_length_exceeded' ? grpc.status.OUT_OF_RANGE : grpc.status.INVALID_ARGUMENT;
        if (!err) {
          bad.push(`${c.name}: gRPC accepted what HTTP refused (${httpErr.message.slice(0, 120)})`);
        } else if (err.code !== want) {
          bad.push(`${c.name}: gRPC code ${err.code}, want ${want}: ${err.details}`);
        } else if (http.status !== 413 && !err.details.includes(`'${c.param}'`)) {
          bad.push(`${c.name}: gRPC message does not name '${c.param}': ${err.details.slice(0, 200)}`);
        }
      }
      console.log(`  ${group}: ${sent[group] ?? 0} of ${mine.length} cases sent through gRPC`);
      assert(bad.length === 0, `${bad.length} wrong:\n    ${bad.join('\n    ')}`);
    });
  }
  console.log(`  not expressible in the proto (by reason): ${JSON.stringify(skipped)}`);

  await check('the cases gRPC must carry were sent (17 stop strings, unknown role, ids outside the vocabulary)',
    () => {
      for (const g of ['range', 'tokens', 'messages', 'huge']) assert((sent[g] ?? 0) > 0, `no ${g} case was sent`);
      for (const n of ['chat messages unknown role', 'completions 17 stop strings (the proto says at most 16)',
        'chat 17 stop strings (the proto says at most 16)', 'completions logit_bias with 100000 entries']) {
        assert(sentNames.has(n), `case '${n}' was not sent through gRPC`);
      }
    });

  await check('server still serves a greedy request over gRPC', async () => {
    const { err, resp } = await unary(client, { token_ids: { ids: doc.bases.completions.prompt },
      params: { temperature: 0, max_tokens: 3, ignore_eos: true } });
    assert(!err, String(err));
    assert(resp.choices[0].token_ids.length === 3, JSON.stringify(resp.choices[0]));
  });

  client.close();
  await check('SIGTERM -> exits', async () => {
    const res = await stopServer();
    assert(res !== null, 'did not exit within the timeout (killed)');
  });
  return finish(failed === 0 ? 0 : 1);
}

main().catch((e) => { console.log(`FAIL unexpected: ${e && e.stack}`); failed += 1; finish(1); });
