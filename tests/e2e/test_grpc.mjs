// End-to-end test of the gRPC API of `tessera serve`, driven by the real
// @grpc/grpc-js client with @grpc/proto-loader (from .deps/npm).
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_grpc.mjs --tessera build/tessera [--keep]
//
// Synthesises a tiny qwen3 checkpoint with `tessera synth`, starts `tessera
// serve --port 0 --grpc-port 0 --port-file F` and waits for HTTP /ready, then
// checks health, ListModels, Tokenize/Detokenize, unary and streamed greedy
// Generate (same tokens and text), n=2, error codes, cancel mid-stream,
// deadlines and graceful exit on SIGTERM. Prints one line per check and
// `N passed, M failed`; exits non-zero when anything failed. Bounded in time.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TOTAL_TIMEOUT_MS = 300_000;
const READY_TIMEOUT_MS = 60_000;
const EXIT_TIMEOUT_MS = 15_000;
const CALL_TIMEOUT_MS = 60_000;

const argv = process.argv.slice(2);
const argAt = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined; };
const tessera = path.resolve(argAt('--tessera') ?? 'build/tessera');
const keep = argv.includes('--keep');
const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const npmDir = process.env.TESSERA_NPM_DIR ?? path.join(repo, '.deps/npm');
const require = createRequire(path.join(path.resolve(npmDir), 'node_modules/'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

let passed = 0;
let failed = 0;
let server = null;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera_grpc_e2e_'));

function assert(cond, msg) { if (!cond) throw new Error(msg); }
function assertEq(a, b, msg) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${msg}: ${ja.slice(0, 300)} != ${jb.slice(0, 300)}`);
}
async function check(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`PASS ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
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

// Promisified calls with a per-call deadline.
const deadline = (ms = CALL_TIMEOUT_MS) => ({ deadline: new Date(Date.now() + ms) });
function unary(client, method, req, meta = new grpc.Metadata(), opts = deadline()) {
  return new Promise((resolve) => {
    client[method](req, meta, opts, (err, resp) => resolve({ err, resp }));
  });
}
// Collects a server stream; onData(msg, call) may cancel.
function stream(client, req, { opts = deadline(), onData = null } = {}) {
  return new Promise((resolve) => {
    const msgs = [];
    const call = client.GenerateStream(req, new grpc.Metadata(), opts);
    call.on('data', (m) => { msgs.push(m); if (onData) onData(m, call); });
    call.on('error', (err) => resolve({ err, msgs }));
    call.on('end', () => resolve({ err: null, msgs }));
  });
}
function collect(msgs) {
  const choices = {};
  for (const m of msgs) {
    for (const d of m.choices) {
      const c = choices[d.index] ?? (choices[d.index] = { text: '', token_ids: [], finish_reason: '' });
      c.text += d.text;
      c.token_ids.push(...d.token_ids);
      if (d.finish_reason) c.finish_reason = d.finish_reason;
    }
  }
  return choices;
}
const greedy = (text, maxTokens) => ({
  text: { text },
  params: { temperature: 0, max_tokens: maxTokens, ignore_eos: true },
});

async function metricValue(httpPort, name) {
  const r = await fetch(`http://127.0.0.1:${httpPort}/metrics`);
  const body = await r.text();
  const line = body.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

async function main() {
  // 1. A tiny model and the server.
  const model = path.join(work, 'model');
  const synth = spawnSync(tessera, ['synth', '--arch', 'qwen3', '--size', 'tiny', '--dtype', 'f32', '--out', model],
    { encoding: 'utf8', timeout: 120_000, env: { ...process.env, TESSERA_NPM_DIR: npmDir } });
  if (synth.status !== 0) {
    console.log(`FAIL synth: ${synth.stderr}`);
    failed += 1;
    return finish(1);
  }
  const portFile = path.join(work, 'ports.json');
  const log = fs.openSync(path.join(work, 'serve.log'), 'w');
  server = spawn(tessera, ['serve', '--model', model, '--port', '0', '--grpc-port', '0', '--port-file', portFile,
    '--threads', '2'], { stdio: ['ignore', log, log] });
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
    assert(ready, `not ready; log: ${fs.readFileSync(path.join(work, 'serve.log'), 'utf8').slice(-2000)}`);
  });
  if (!ready) return finish(1);

  const def = protoLoader.loadSync(['proto/tessera.proto', 'proto/health.proto'], {
    includeDirs: [repo], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const target = `127.0.0.1:${ports.grpc}`;
  const client = new pkg.tessera.v1.Tessera(target, grpc.credentials.createInsecure());
  const health = new pkg.grpc.health.v1.Health(target, grpc.credentials.createInsecure());

  // gRPC readiness follows the model load like /ready; allow the health
  // service a moment to notice it.
  await check('health "" and tessera.v1.Tessera SERVING', async () => {
    for (const service of ['', 'tessera.v1.Tessera']) {
      let status = null;
      const by = Date.now() + READY_TIMEOUT_MS;
      while (Date.now() < by) {
        const { err, resp } = await unary(health, 'Check', { service });
        assert(!err, `health ${service}: ${err}`);
        status = resp.status;
        if (status === 'SERVING') break;
        await sleep(100);
      }
      assertEq(status, 'SERVING', `health ${service}`);
    }
  });

  await check('ListModels', async () => {
    const { err, resp } = await unary(client, 'ListModels', {});
    assert(!err, String(err));
    assertEq(resp.models.length, 1, 'one model');
    assert(resp.models[0].id.length > 0 && resp.models[0].vocab_size > 0, JSON.stringify(resp.models[0]));
  });

  let helloIds = null;
  await check('Tokenize + Detokenize round trip', async () => {
    const t = await unary(client, 'Tokenize', { text: { text: 'Hello world', add_special_tokens: false } });
    assert(!t.err, String(t.err));
    assert(t.resp.token_ids.length > 0 && t.resp.tokens.length === t.resp.token_ids.length, 'tokens');
    helloIds = t.resp.token_ids;
    const d = await unary(client, 'Detokenize', { token_ids: helloIds });
    assert(!d.err, String(d.err));
    assertEq(d.resp.text, 'Hello world', 'detokenized');
  });

  let unaryChoice = null;
  await check('Generate unary greedy', async () => {
    const { err, resp } = await unary(client, 'Generate', greedy('Hello there, how are', 12));
    assert(!err, String(err));
    assertEq(resp.choices.length, 1, 'choices');
    unaryChoice = resp.choices[0];
    assertEq(unaryChoice.token_ids.length, 12, 'tokens');
    assertEq(unaryChoice.finish_reason, 'length', 'finish_reason');
    assertEq(resp.usage.completion_tokens, 12, 'usage.completion_tokens');
    assert(resp.finished, 'finished');
  });

  await check('GenerateStream greedy equals unary', async () => {
    const { err, msgs } = await stream(client, greedy('Hello there, how are', 12));
    assert(!err, String(err));
    assert(msgs.length >= 1 && msgs[msgs.length - 1].finished, 'last message finished');
    const c = collect(msgs)[0];
    assertEq(c.token_ids, unaryChoice.token_ids, 'token ids');
    assertEq(c.text, unaryChoice.text, 'text');
    assertEq(c.finish_reason, 'length', 'finish_reason');
  });

  await check('Generate n=2 with token-id prompt', async () => {
    const req = { token_ids: { ids: helloIds }, params: { n: 2, seed: 3, max_tokens: 5, ignore_eos: true } };
    const { err, resp } = await unary(client, 'Generate', req);
    assert(!err, String(err));
    assertEq(resp.choices.map((c) => [c.index, c.token_ids.length]), [[0, 5], [1, 5]], 'choices');
  });

  await check('bad temperature -> INVALID_ARGUMENT naming it', async () => {
    const req = greedy('Hi', 4);
    req.params.temperature = 7;
    const { err } = await unary(client, 'Generate', req);
    assert(err && err.code === grpc.status.INVALID_ARGUMENT, `got ${err && err.code}`);
    assert(err.details.includes('temperature'), err.details);
  });

  await check('token id outside vocab -> INVALID_ARGUMENT', async () => {
    const { err } = await unary(client, 'Generate', { token_ids: { ids: [1, 1 << 30] }, params: {} });
    assert(err && err.code === grpc.status.INVALID_ARGUMENT, `got ${err && err.code}`);
  });

  await check('context too long -> OUT_OF_RANGE', async () => {
    const { err } = await unary(client, 'Generate', greedy('Hi', 1 << 24));
    assert(err && err.code === grpc.status.OUT_OF_RANGE, `got ${err && err.code}: ${err && err.details}`);
  });

  const idle = async () => {
    const by = Date.now() + 10_000;
    let v;
    while (Date.now() < by) {
      v = await metricValue(ports.http, 'tessera:num_requests_running');
      if (v === undefined || v === 0) return;
      await sleep(50);
    }
    throw new Error(`tessera:num_requests_running stays ${v}`);
  };

  await check('call.cancel() mid-stream -> CANCELLED, request freed', async () => {
    let cancelled = false;
    const { err, msgs } = await stream(client, greedy('Tell me a long story', 400), {
      onData: (m, call) => { if (!cancelled) { cancelled = true; call.cancel(); } },
    });
    assert(err && err.code === grpc.status.CANCELLED, `got ${err && err.code}`);
    assert(msgs.length >= 1 && msgs.length < 400, `${msgs.length} messages`);
    await idle();
  });

  await check('1 ms deadline -> DEADLINE_EXCEEDED, request freed', async () => {
    const u = await unary(client, 'Generate', greedy('Tell me a long story', 400), new grpc.Metadata(), deadline(1));
    assert(u.err && u.err.code === grpc.status.DEADLINE_EXCEEDED, `unary got ${u.err && u.err.code}`);
    const s = await stream(client, greedy('Tell me a long story', 400), { opts: deadline(30) });
    assert(s.err && s.err.code === grpc.status.DEADLINE_EXCEEDED, `stream got ${s.err && s.err.code}`);
    await idle();
  });

  await check('server still serves after cancels', async () => {
    const { err, resp } = await unary(client, 'Generate', greedy('Hello there, how are', 12));
    assert(!err, String(err));
    assertEq(resp.choices[0].token_ids, unaryChoice.token_ids, 'same greedy tokens');
  });

  client.close();
  health.close();
  await check('SIGTERM -> exits', async () => {
    const res = await stopServer();
    assert(res !== null, 'did not exit within the timeout (killed)');
  });
  return finish(failed === 0 ? 0 : 1);
}

main().catch((e) => { console.log(`FAIL unexpected: ${e && e.stack}`); failed += 1; finish(1); });
