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
// --max-body-bytes (413) is a message over gRPC's size limit (RESOURCE_EXHAUSTED).
// Then a router (`serve --role router`, HTTP and gRPC, the same limits) in front
// of that instance takes every case again, on both of its front ends, and must
// refuse each with the same status and param; its gRPC front must also refuse
// calls beyond --max-pending-requests with RESOURCE_EXHAUSTED (HTTP: 429) and,
// when a client cancels a stream mid-generation, cancel its upstream call so
// the instance aborts the request (KV idle on the instance's /metrics).
// Prints one line per check and `N passed, M failed`. Bounded in time.
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

const ROUTER_MAX_PENDING = 4;

let passed = 0;
let failed = 0;
const servers = [];  // started processes, the router last: stopped in reverse order
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

async function stopServer(server) {
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
  for (const s of [...servers].reverse()) await stopServer(s).catch(() => {});
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
  const instance = await startServe('instance', ['--model', model, '--served-model-name', doc.model, '--threads', '2']);
  await check('server ready (port file + /ready)', () => assert(instance.ready, instance.why));
  if (!instance.ready) return finish(1);

  const def = protoLoader.loadSync(['proto/tessera.proto'], {
    includeDirs: [repo], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const clientOf = (ports) => new pkg.tessera.v1.Tessera(`127.0.0.1:${ports.grpc}`, grpc.credentials.createInsecure(),
    { 'grpc.max_send_message_length': 64 << 20 });
  const client = clientOf(instance.ports);
  const greedy = { token_ids: { ids: doc.bases.completions.prompt }, params: { temperature: 0, max_tokens: 3,
    ignore_eos: true } };

  await runCases('', doc, cases, instance.ports.http, client);

  await check('server still serves a greedy request over gRPC', async () => {
    const { err, resp } = await unary(client, greedy);
    assert(!err, String(err));
    assert(resp.choices[0].token_ids.length === 3, JSON.stringify(resp.choices[0]));
  });

  // The same cases through a router in front of the instance.
  const router = await startServe('router', ['--role', 'router', '--decode-instances',
    `127.0.0.1:${instance.ports.http}`, '--max-pending-requests', String(ROUTER_MAX_PENDING),
    '--router-poll-interval', '0.1']);
  await check('router ready (port file + /ready)', () => assert(router.ready, router.why));
  if (router.ready) {
    const rclient = clientOf(router.ports);
    await runCases('router: ', doc, cases, router.ports.http, rclient);
    await routerChecks(rclient, router.ports, instance.ports, greedy);
    rclient.close();
  }

  client.close();
  await check('SIGTERM -> exits', async () => {
    for (const s of [...servers].reverse()) {
      const res = await stopServer(s);
      assert(res !== null, 'did not exit within the timeout (killed)');
    }
  });
  return finish(failed === 0 ? 0 : 1);
}

// Starts `tessera serve ARGS` on free HTTP and gRPC ports, with the bad-input
// body limit (as test_bad_input.py: its (400, 413) cases get 413 fast); waits
// for /ready. {ready, ports, why}.
async function startServe(name, args) {
  const portFile = path.join(work, `${name}.ports.json`);
  const logPath = path.join(work, `${name}.log`);
  const log = fs.openSync(logPath, 'w');
  const proc = spawn(tessera, ['serve', ...args, '--port', '0', '--grpc-port', '0', '--port-file', portFile,
    '--max-body-bytes', String(256 * 1024)], { stdio: ['ignore', log, log] });
  servers.push(proc);
  let ports = null;
  const readyBy = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < readyBy && proc.exitCode === null) {
    try { ports = JSON.parse(fs.readFileSync(portFile, 'utf8')); } catch { /* not yet */ }
    if (ports && ports.http > 0 && ports.grpc > 0) {
      try {
        if ((await fetch(`http://127.0.0.1:${ports.http}/ready`)).status === 200) return { ready: true, ports };
      } catch { /* not yet */ }
    }
    await sleep(100);
  }
  return { ready: false, ports, why: `${name} not ready; log: ${fs.readFileSync(logPath, 'utf8').slice(-2000)}` };
}

// Every proto-expressible case, over HTTP (httpPort) and gRPC (client): refused
// with the case's status and param on both.
async function runCases(label, doc, cases, httpPort, client) {
  const skipped = {};
  const sent = {};
  const sentNames = new Set();
  const groups = [...new Set(cases.map((c) => c.group))];
  for (const group of groups) {
    const mine = cases.filter((c) => c.group === group);
    await check(`${label}group ${group}: every proto-expressible case refused alike by HTTP and gRPC`, async () => {
      const bad = [];
      for (const c of mine) {
        const { req, why } = toProto(c.endpoint, c.body, doc.model);
        if (!req) {
          skipped[why] = (skipped[why] ?? 0) + 1;
          continue;
        }
        sent[group] = (sent[group] ?? 0) + 1;
        sentNames.add(c.name);
        const http = await postJson(httpPort, c.endpoint, c.body);
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

  await check(`${label}the cases gRPC must carry were sent (17 stop strings, unknown role, ids outside the vocabulary)`,
    () => {
      for (const g of ['range', 'tokens', 'messages', 'huge']) assert((sent[g] ?? 0) > 0, `no ${g} case was sent`);
      for (const n of ['chat messages unknown role', 'completions 17 stop strings (the proto says at most 16)',
        'chat 17 stop strings (the proto says at most 16)', 'completions logit_bias with 100000 entries']) {
        assert(sentNames.has(n), `case '${n}' was not sent through gRPC`);
      }
    });
}

// Prometheus text -> {name: value}, summed over labels (as serve_util.py's parse_metrics).
async function metrics(httpPort) {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[3]);
  }
  return out;
}

// Nothing running or waiting on the instance and its KV cache empty.
async function instanceIdle(httpPort) {
  const by = Date.now() + 10_000;
  let m = {};
  while (Date.now() < by) {
    m = await metrics(httpPort);
    if (m['tessera:num_requests_running'] === 0 && m['tessera:num_requests_waiting'] === 0 &&
        m['tessera:kv_cache_usage_perc'] === 0) return;
    await sleep(20);
  }
  throw new Error(`instance not idle after 10 s: running ${m['tessera:num_requests_running']}, waiting ` +
    `${m['tessera:num_requests_waiting']}, kv ${m['tessera:kv_cache_usage_perc']}`);
}

// A GenerateStream that reports once its first message arrived; cancel() ends it.
function longStream(client, ids) {
  const call = client.GenerateStream({ token_ids: { ids },
    params: { temperature: 0, max_tokens: 3000, ignore_eos: true } }, new grpc.Metadata(),
  { deadline: new Date(Date.now() + CALL_TIMEOUT_MS) });
  let messages = 0;
  let first;
  const firstMessage = new Promise((r) => { first = r; });
  const ended = new Promise((resolve) => {
    call.on('data', () => { messages += 1; first(); });
    call.on('error', (err) => { first(); resolve(err); });
    call.on('end', () => { first(); resolve(null); });
  });
  return { call, firstMessage, ended, messages: () => messages };
}

async function routerChecks(rclient, rports, iports, greedy) {
  await check('router: a stream cancelled mid-generation -> CANCELLED, the instance aborts it (KV idle)', async () => {
    const s = longStream(rclient, greedy.token_ids.ids);
    await s.firstMessage;
    s.call.cancel();
    const err = await s.ended;
    assert(err && err.code === grpc.status.CANCELLED, `got ${err && err.code}`);
    assert(s.messages() >= 1 && s.messages() < 3000, `${s.messages()} messages`);
    const t0 = Date.now();
    await instanceIdle(iports.http);
    console.log(`  instance idle ${Date.now() - t0} ms after the cancel`);
  });

  await check(`router: beyond --max-pending-requests ${ROUTER_MAX_PENDING} -> gRPC RESOURCE_EXHAUSTED (HTTP 429); ` +
    'places come back when the held streams are cancelled', async () => {
    const held = Array.from({ length: ROUTER_MAX_PENDING }, () => longStream(rclient, greedy.token_ids.ids));
    try {
      await Promise.all(held.map((h) => h.firstMessage));
      for (const h of held) assert(h.messages() >= 1, 'a held stream ended before the check');
      const { err } = await unary(rclient, greedy);
      assert(err && err.code === grpc.status.RESOURCE_EXHAUSTED, `unary got ${err && err.code}: ${err && err.details}`);
      const http = await postJson(rports.http, 'completions', { prompt: greedy.token_ids.ids, max_tokens: 1 });
      assert(http.status === 429, `HTTP got ${http.status}`);
    } finally {
      for (const h of held) h.call.cancel();
    }
    const errs = await Promise.all(held.map((h) => h.ended));
    assert(errs.every((e) => e && e.code === grpc.status.CANCELLED), `held streams ended ${errs.map((e) => e && e.code)}`);
    await instanceIdle(iports.http);
    // The router releases a place when the call's handler returns (its upstream call cancelled).
    const by = Date.now() + 5_000;
    let out = await unary(rclient, greedy);
    while (out.err && out.err.code === grpc.status.RESOURCE_EXHAUSTED && Date.now() < by) {
      await sleep(20);
      out = await unary(rclient, greedy);
    }
    assert(!out.err, `after the cancels: ${out.err}`);
    assert(out.resp.choices[0].token_ids.length === 3, JSON.stringify(out.resp.choices[0]));
  });
}

main().catch((e) => { console.log(`FAIL unexpected: ${e && e.stack}`); failed += 1; finish(1); });
