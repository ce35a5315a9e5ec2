#!/usr/bin/env node
// End-to-end test of `tessera serve` through the official `openai` npm client.
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_openai_client.mjs --tessera build/tessera [--keep]
//
// Synthesises a tiny random-weight qwen3 checkpoint (real tokenizer and chat
// template), starts `tessera serve --api-key` on a free port and drives it with
// the openai client: completions and chat, streamed and not (same text under
// temperature 0), n with seed, stop strings, max_tokens/ignore_eos, logprobs,
// stream usage, models.list, typed errors (400 param, context length, 404, 401),
// an aborted stream, and greedy batch invariance over 8 concurrent requests.
// Prints one line per check and ends with `N passed, M failed`; exit code 1 on
// any failure.
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const npmDir = process.env.TESSERA_NPM_DIR ?? path.resolve('.deps/npm');
const require = createRequire(path.join(npmDir, 'node_modules/'));
const OpenAIModule = require('openai');
const OpenAI = OpenAIModule.default ?? OpenAIModule;

const args = process.argv.slice(2);
const argValue = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const tessera = path.resolve(argValue('--tessera') ?? 'build/tessera');
const keep = args.includes('--keep');

const API_KEY = 'sk-tessera-e2e-' + process.pid;
const NAME = 'tiny-e2e';
const READY_TIMEOUT_MS = 60_000;
const CHECK_TIMEOUT_MS = 60_000;
const WHOLE_TEST_MS = 170_000;
const PROMPT = 'The quick brown fox jumps over the lazy dog. Once upon a time';
const MESSAGES = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let passed = 0;
let failed = 0;
let server = null;
const t0 = Date.now();

function logTail(n = 15) {
  if (!server) return '';
  try {
    return fs.readFileSync(server.logPath, 'utf8').split('\n').slice(-n - 1).join('\n  ');
  } catch { return '(no log)'; }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([promise, new Promise((_, rej) => {
    timer = setTimeout(() => rej(new Error(`${what}: timed out after ${ms / 1000}s`)), ms);
  })]).finally(() => clearTimeout(timer));
}

async function check(name, fn) {
  const start = Date.now();
  try {
    await withTimeout(Promise.resolve().then(fn), CHECK_TIMEOUT_MS, name);
  } catch (e) {
    failed++;
    let msg = e?.stack?.split('\n').slice(0, 2).join(' | ') ?? String(e);
    if (e instanceof OpenAI.APIError) msg = `${e.constructor.name} status=${e.status} error=${JSON.stringify(e.error)}`;
    console.log(`FAIL ${name}: ${msg.slice(0, 3000)}`);
    console.log('  --- server log tail ---\n  ' + logTail());
    return false;
  }
  passed++;
  const dt = (Date.now() - start) / 1000;
  console.log(`PASS ${name}${dt >= 1 ? ` (${dt.toFixed(1)}s)` : ''}`);
  return true;
}

function assert(cond, msg) { if (!cond) throw new Error(typeof msg === 'function' ? msg() : msg); }
function assertEq(a, b, what) {
  assert(JSON.stringify(a) === JSON.stringify(b), () => `${what}: ${JSON.stringify(a)?.slice(0, 800)} !== ${JSON.stringify(b)?.slice(0, 800)}`);
}
async function expectError(promise, Cls, status) {
  try {
    const r = await promise;
    throw new Error(`expected ${Cls.name} (${status}), got a response: ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    assert(e instanceof Cls && e.status === status,
      () => `expected ${Cls.name} ${status}, got ${e.constructor.name} ${e.status} ${JSON.stringify(e.error)}`);
    return e;
  }
}

// --- server --------------------------------------------------------------------

function startServer(model, workdir) {
  const logPath = path.join(workdir, 'serve.log');
  const portFile = path.join(workdir, 'port.json');
  const log = fs.openSync(logPath, 'w');
  const proc = spawn(tessera, ['serve', '--model', model, '--served-model-name', NAME, '--host', '127.0.0.1',
    '--port', '0', '--grpc-port', '-1', '--port-file', portFile, '--api-key', API_KEY],
  { stdio: ['ignore', log, log] });
  const s = { proc, logPath, portFile, port: null, exited: null };
  proc.on('exit', (code, signal) => { s.exited = { code, signal }; });
  fs.closeSync(log);
  return s;
}

async function waitReady(s) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (s.exited) throw new Error(`server exited ${JSON.stringify(s.exited)}`);
    if (s.port === null) {
      try { s.port = JSON.parse(fs.readFileSync(s.portFile, 'utf8')).http; } catch { /* not yet */ }
    }
    if (s.port !== null) {
      try {
        const r = await fetch(`http://127.0.0.1:${s.port}/ready`);
        if (r.status === 200) return;
      } catch { /* not listening yet */ }
    }
    await sleep(50);
  }
  throw new Error(`not ready within ${READY_TIMEOUT_MS / 1000}s`);
}

async function stopServer(s, timeoutMs = 15_000) {
  if (!s || s.exited) return s?.exited;
  const done = new Promise((r) => s.proc.once('exit', (code, signal) => r({ code, signal })));
  s.proc.kill('SIGTERM');
  const res = await Promise.race([done, sleep(timeoutMs).then(() => null)]);
  if (res) return res;
  console.log('server ignored SIGTERM; SIGKILL');
  s.proc.kill('SIGKILL');
  await done;
  return { code: null, signal: 'SIGKILL' };
}

async function metrics() {
  const r = await fetch(`http://127.0.0.1:${server.port}/metrics`);
  assert(r.status === 200, `/metrics status ${r.status}`);
  const out = {};
  for (const line of (await r.text()).split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m && !line.startsWith('#')) out[m[1]] = (out[m[1]] ?? 0) + Number(m[3]);
  }
  return out;
}

async function waitIdle(ms = 20_000) {
  const deadline = Date.now() + ms;
  let m = {};
  while (Date.now() < deadline) {
    m = await metrics();
    if (m['tessera:num_requests_running'] === 0 && m['tessera:kv_cache_usage_perc'] === 0) return m;
    await sleep(200);
  }
  throw new Error(`not idle after ${ms / 1000}s: running=${m['tessera:num_requests_running']} ` +
    `kv_cache_usage_perc=${m['tessera:kv_cache_usage_perc']}`);
}

// A stop string taken from the middle of `text`: returns [stop, expected text before it] or null.
function pickStop(text) {
  for (let k = Math.floor(text.length / 3); k + 3 <= text.length; k++) {
    const s = text.slice(k, k + 3);
    if (/[\ud800-\udfff\ufffd]/.test(s) || s.trim().length < 3) continue;
    const first = text.indexOf(s);
    if (first <= 0) continue;
    return [s, text.slice(0, first)];
  }
  return null;
}

// --- checks --------------------------------------------------------------------

async function runChecks(client) {
  const st = {};

  await check('models.list() contains the served model name', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assertEq(ids, [NAME], 'model ids');
  });

  const completionReq = { model: NAME, prompt: PROMPT, max_tokens: 16, temperature: 0 };
  await check('completions: non-stream greedy, usage', async () => {
    const r = await client.completions.create(completionReq);
    assert(r.object === 'text_completion' && r.model === NAME && r.choices.length === 1, () => JSON.stringify(r));
    const c = r.choices[0];
    assert(typeof c.text === 'string' && c.text.length > 0 && c.index === 0, () => JSON.stringify(c));
    assert(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    const u = r.usage;
    assert(u.prompt_tokens > 5 && u.completion_tokens >= 1 && u.completion_tokens <= 16 &&
      u.total_tokens === u.prompt_tokens + u.completion_tokens, () => `usage ${JSON.stringify(u)}`);
    if (c.finish_reason === 'length') assertEq(u.completion_tokens, 16, 'completion_tokens at length');
    st.completion = r;
  });

  await check('completions: stream text == non-stream text, same finish_reason', async () => {
    assert(st.completion, 'no non-stream result');
    const stream = await client.completions.create({ ...completionReq, stream: true });
    let text = '';
    let finish = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert(chunk.object === 'text_completion' && chunk.id, () => `chunk ${JSON.stringify(chunk)}`);
      for (const c of chunk.choices) {
        text += c.text ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assertEq(text, st.completion.choices[0].text, 'streamed text');
    assertEq(finish, st.completion.choices[0].finish_reason, 'finish_reason');
    assert(chunks >= 2, `only ${chunks} chunks`);
  });

  const chatReq = { model: NAME, messages: MESSAGES, max_tokens: 16, temperature: 0 };
  await check('chat: non-stream greedy, assistant message, usage', async () => {
    const r = await client.chat.completions.create(chatReq);
    assert(r.object === 'chat.completion' && r.model === NAME && r.choices.length === 1, () => JSON.stringify(r));
    const c = r.choices[0];
    assert(c.message.role === 'assistant' && typeof c.message.content === 'string' && c.message.content.length > 0,
      () => JSON.stringify(c));
    assert(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    assert(r.usage.prompt_tokens > 10 && r.usage.completion_tokens >= 1 &&
      r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, JSON.stringify(r.usage));
    st.chat = r;
  });

  await check('chat: stream (role first, content, finish_reason) == non-stream', async () => {
    assert(st.chat, 'no non-stream result');
    const stream = await client.chat.completions.create({ ...chatReq, stream: true });
    let content = '';
    let finish = null;
    let first = true;
    for await (const chunk of stream) {
      assert(chunk.object === 'chat.completion.chunk', () => `chunk ${JSON.stringify(chunk)}`);
      const c = chunk.choices[0];
      if (first) {
        assert(c && c.delta.role === 'assistant', () => `first chunk delta has no role: ${JSON.stringify(chunk)}`);
        first = false;
      }
      if (!c) continue;
      content += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    assertEq(content, st.chat.choices[0].message.content, 'streamed content');
    assertEq(finish, st.chat.choices[0].finish_reason, 'finish_reason');
  });

  await check('completions: n=2 with seed -> choices 0 and 1, reproducible with the same seed', async () => {
    const req = { model: NAME, prompt: PROMPT, max_tokens: 8, n: 2, seed: 1234, temperature: 1.0 };
    const a = await client.completions.create(req);
    const b = await client.completions.create(req);
    assertEq(a.choices.map((c) => c.index).sort(), [0, 1], 'indices');
    const texts = (r) => [...r.choices].sort((x, y) => x.index - y.index).map((c) => c.text);
    assertEq(texts(b), texts(a), 'same seed, same choices');
    const lengthChoices = a.choices.filter((c) => c.finish_reason === 'length').length;
    assert(a.usage.completion_tokens >= 8 * lengthChoices + (2 - lengthChoices) && a.usage.completion_tokens <= 16,
      () => `usage ${JSON.stringify(a.usage)} for finish_reasons ${a.choices.map((c) => c.finish_reason)}`);
  });

  await check('chat: n=2 with seed -> choices 0 and 1', async () => {
    const r = await client.chat.completions.create({ ...chatReq, n: 2, seed: 7, temperature: 0.8 });
    assertEq(r.choices.map((c) => c.index).sort(), [0, 1], 'indices');
    for (const c of r.choices) assert(c.message.role === 'assistant', JSON.stringify(c));
  });

  await check('completions: max_tokens 5 + ignore_eos -> finish_reason length, completion_tokens 5', async () => {
    const r = await client.completions.create({ ...completionReq, max_tokens: 5, ignore_eos: true });
    assertEq(r.choices[0].finish_reason, 'length', 'finish_reason');
    assertEq(r.usage.completion_tokens, 5, 'completion_tokens');
  });

  await check('chat: max_completion_tokens 6 + ignore_eos -> length, completion_tokens 6', async () => {
    const r = await client.chat.completions.create({ model: NAME, messages: MESSAGES, temperature: 0,
      max_completion_tokens: 6, ignore_eos: true });
    assertEq(r.choices[0].finish_reason, 'length', 'finish_reason');
    assertEq(r.usage.completion_tokens, 6, 'completion_tokens');
  });

  await check('completions: stop string from a greedy output cuts before it, finish_reason stop', async () => {
    const long = await client.completions.create({ ...completionReq, max_tokens: 40, ignore_eos: true });
    const text = long.choices[0].text;
    const picked = pickStop(text);
    assert(picked, `no usable stop substring in ${JSON.stringify(text)}`);
    const [stop, want] = picked;
    const r = await client.completions.create({ ...completionReq, max_tokens: 40, ignore_eos: true, stop: [stop] });
    assertEq(r.choices[0].text, want, `text with stop ${JSON.stringify(stop)}`);
    assertEq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    // streamed: the same cut
    const stream = await client.completions.create({ ...completionReq, max_tokens: 40, ignore_eos: true,
      stop: [stop], stream: true });
    let s = '';
    let finish = null;
    for await (const chunk of stream) for (const c of chunk.choices) { s += c.text ?? ''; finish = c.finish_reason ?? finish; }
    assertEq(s, want, 'streamed text with stop');
    assertEq(finish, 'stop', 'streamed finish_reason');
  });

  await check('completions: logprobs 2 -> tokens/token_logprobs/top_logprobs/text_offset per token', async () => {
    const r = await client.completions.create({ ...completionReq, max_tokens: 6, ignore_eos: true, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    const n = r.usage.completion_tokens;
    assertEq(n, 6, 'completion_tokens');
    assert(lp, 'no logprobs');
    for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) {
      assert(Array.isArray(lp[k]) && lp[k].length === n, () => `${k} length ${lp[k]?.length} != ${n}`);
    }
    for (let i = 0; i < n; i++) {
      assert(typeof lp.tokens[i] === 'string', `tokens[${i}]`);
      assert(lp.token_logprobs[i] <= 0, `token_logprobs[${i}] = ${lp.token_logprobs[i]}`);
      const top = Object.values(lp.top_logprobs[i]);
      assert(top.length >= 1 && top.length <= 3, () => `top_logprobs[${i}] = ${JSON.stringify(lp.top_logprobs[i])}`);
      // greedy: the sampled token is the most likely one
      assert(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-4,
        () => `greedy token logprob ${lp.token_logprobs[i]} != top ${JSON.stringify(lp.top_logprobs[i])}`);
      if (i > 0) assert(lp.text_offset[i] >= lp.text_offset[i - 1], 'text_offset not monotone');
    }
    assertEq(lp.text_offset[0], 0, 'text_offset[0] (no echo)');
  });

  await check('chat: logprobs true, top_logprobs 2 -> content[i] token/logprob/bytes/top_logprobs', async () => {
    const r = await client.chat.completions.create({ ...chatReq, max_tokens: 6, ignore_eos: true, logprobs: true,
      top_logprobs: 2 });
    const content = r.choices[0].logprobs?.content;
    assert(Array.isArray(content) && content.length === r.usage.completion_tokens && content.length === 6,
      () => `logprobs.content length ${content?.length}, completion_tokens ${r.usage.completion_tokens}`);
    let joined = [];
    for (const [i, e] of content.entries()) {
      assert(typeof e.token === 'string' && e.logprob <= 0, () => `content[${i}] = ${JSON.stringify(e)}`);
      assert(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256),
        () => `content[${i}].bytes = ${JSON.stringify(e.bytes)}`);
      joined = joined.concat(e.bytes);
      assert(Array.isArray(e.top_logprobs) && e.top_logprobs.length === 2,
        () => `content[${i}].top_logprobs = ${JSON.stringify(e.top_logprobs)}`);
      assert(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, `top_logprobs not sorted at ${i}`);
      assert(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, () => `greedy token not the top at ${i}: ${JSON.stringify(e)}`);
    }
    assertEq(Buffer.from(joined).toString('utf8'), r.choices[0].message.content, 'bytes joined == content');
  });

  await check('completions stream include_usage: last chunk has choices [] and usage', async () => {
    const stream = await client.completions.create({ ...completionReq, max_tokens: 7, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    assertEq(last.choices, [], 'last chunk choices');
    assert(last.usage, 'no usage on the last chunk');
    assertEq(last.usage.completion_tokens, 7, 'completion_tokens');
    assertEq(last.usage.prompt_tokens, st.completion?.usage.prompt_tokens, 'prompt_tokens');
    assertEq(last.usage.total_tokens, last.usage.prompt_tokens + 7, 'total_tokens');
    for (const c of chunks.slice(0, -1)) assert(!c.usage, () => `usage before the last chunk: ${JSON.stringify(c)}`);
  });

  await check('chat stream include_usage: last chunk has choices [] and usage', async () => {
    const stream = await client.chat.completions.create({ ...chatReq, max_tokens: 5, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    assertEq(last.choices, [], 'last chunk choices');
    assertEq(last.usage?.completion_tokens, 5, 'completion_tokens');
    assertEq(last.usage?.prompt_tokens, st.chat?.usage.prompt_tokens, 'prompt_tokens');
  });

  await check('error: temperature 5 -> BadRequestError 400, param temperature', async () => {
    const e = await expectError(client.completions.create({ ...completionReq, temperature: 5 }),
      OpenAI.BadRequestError, 400);
    assertEq(e.param, 'temperature', 'param');
    const e2 = await expectError(client.chat.completions.create({ ...chatReq, temperature: 5 }),
      OpenAI.BadRequestError, 400);
    assertEq(e2.param, 'temperature', 'chat param');
  });

  await check('error: context length exceeded -> 400 code context_length_exceeded', async () => {
    const e = await expectError(client.completions.create({ ...completionReq, max_tokens: 10_000_000 }),
      OpenAI.BadRequestError, 400);
    assertEq(e.code, 'context_length_exceeded', 'code');
    const e2 = await expectError(client.chat.completions.create({ ...chatReq, max_tokens: 10_000_000 }),
      OpenAI.BadRequestError, 400);
    assertEq(e2.code, 'context_length_exceeded', 'chat code');
  });

  await check('error: unknown model -> NotFoundError 404, code model_not_found', async () => {
    const e = await expectError(client.completions.create({ ...completionReq, model: 'gpt-4o' }),
      OpenAI.NotFoundError, 404);
    assertEq(e.code, 'model_not_found', 'code');
    await expectError(client.chat.completions.create({ ...chatReq, model: 'gpt-4o' }), OpenAI.NotFoundError, 404);
  });

  await check('error: wrong API key -> AuthenticationError 401 (completions, chat, models)', async () => {
    const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: client.baseURL, maxRetries: 0, timeout: 30_000 });
    const e = await expectError(bad.completions.create(completionReq), OpenAI.AuthenticationError, 401);
    assertEq(e.type, 'authentication_error', 'type');
    await expectError(bad.chat.completions.create(chatReq), OpenAI.AuthenticationError, 401);
    await expectError(bad.models.list(), OpenAI.AuthenticationError, 401);
    const none = await fetch(`${client.baseURL}/models`);
    assertEq(none.status, 401, 'no Authorization header');
    const health = await fetch(`http://127.0.0.1:${server.port}/health`);
    assertEq(health.status, 200, '/health without a key');
  });

  await check('abort mid-stream (AbortController): request freed, server keeps working', async () => {
    const controller = new AbortController();
    const stream = await client.completions.create({ ...completionReq, max_tokens: 2000, ignore_eos: true,
      stream: true }, { signal: controller.signal });
    let chunks = 0;
    let aborted = false;
    try {
      for await (const chunk of stream) {
        void chunk;
        if (++chunks === 3) controller.abort();
      }
    } catch (e) {
      aborted = e instanceof OpenAI.APIUserAbortError || e?.name === 'AbortError';
      if (!aborted) throw e;
    }
    assert(aborted || chunks <= 4, `stream went on after abort: ${chunks} chunks`);
    const m = await waitIdle(20_000);
    assert(m['tessera:generation_tokens_total'] < 1000,
      `aborted request kept generating: generation_tokens_total ${m['tessera:generation_tokens_total']}`);
    const r = await client.completions.create(completionReq);
    assertEq(r.choices[0].text, st.completion?.choices[0].text, 'fresh greedy completion');
  });

  await check('greedy batch invariance: 8 concurrent chat requests == single-request content', async () => {
    assert(st.chat, 'no single-request result');
    const rs = await Promise.all(Array.from({ length: 8 }, () => client.chat.completions.create(chatReq)));
    const want = st.chat.choices[0].message.content;
    const got = rs.map((r) => r.choices[0].message.content);
    assert(got.every((c) => c === want), () => `contents differ from ${JSON.stringify(want)}: ${JSON.stringify(got)}`);
    const rc = await Promise.all(Array.from({ length: 8 }, () => client.completions.create(completionReq)));
    const wantC = st.completion.choices[0].text;
    assert(rc.every((r) => r.choices[0].text === wantC),
      () => `completion texts differ from ${JSON.stringify(wantC)}: ${JSON.stringify(rc.map((r) => r.choices[0].text))}`);
  });

  await check('SIGTERM -> exit code 0', async () => {
    const res = await stopServer(server);
    assertEq(res, { code: 0, signal: null }, 'exit');
  });
}

async function main() {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-e2e-openai-'));
  const watchdog = setTimeout(() => {
    console.log(`FAIL whole test: over ${WHOLE_TEST_MS / 1000}s`);
    if (server && !server.exited) server.proc.kill('SIGKILL');
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
  }, WHOLE_TEST_MS);
  try {
    const model = path.join(workdir, 'tiny-qwen3');
    await check('synth tiny qwen3 model', () => {
      execFileSync(tessera, ['synth', '--arch', 'qwen3', '--size', 'tiny', '--dtype', 'f32', '--out', model],
        { stdio: ['ignore', 'ignore', 'pipe'], timeout: 120_000 });
    });
    server = startServer(model, workdir);
    if (await check('server becomes ready (--api-key, --port 0, --port-file)', () => waitReady(server))) {
      const client = new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0,
        timeout: 60_000 });
      await runChecks(client);
    }
  } finally {
    await stopServer(server);
    clearTimeout(watchdog);
    if (keep) console.log(`kept ${workdir}`);
    else fs.rmSync(workdir, { recursive: true, force: true });
  }
  console.log(`(${((Date.now() - t0) / 1000).toFixed(1)}s)`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch(async (e) => {
  console.log(`FAIL unexpected: ${e?.stack ?? e}`);
  if (server && !server.exited) server.proc.kill('SIGKILL');
  process.exit(1);
});
