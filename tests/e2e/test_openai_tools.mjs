#!/usr/bin/env node
// End-to-end: tool calls and reasoning output of `tessera serve` parsed by the
// official `openai` npm client (non-streamed messages, streamed deltas
// accumulated by the client's own stream helper).
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_openai_tools.mjs --tessera build/tessera [--keep]
//
// The model is a tiny random-weight qwen3 checkpoint with the real Qwen3
// tokenizer and chat template; the server runs with `--reasoning-parser qwen3`
// and no --tool-call-parser, so the hermes format comes from the template.
// A random model writes no tool call by itself, so the assistant's text is
// fixed with two real API features rather than a test-only hook:
//   * continue_final_message + echo: the request ends with a partial assistant
//     message holding the <tool_call> / <think> markup; with echo the response
//     message is that prefix plus the continuation, and the server parses the
//     whole assistant message;
//   * logit_bias: +100 on <|im_end|> (the model's end-of-turn token) ends the
//     continuation at once, or +100 on an ordinary token makes it generate that.
// tool_choice "required" / a named function are checked without such help:
// the grammar forces the calls, and ajv validates their arguments.
// Then the llama3_json and mistral formats, each on a server started with
// --tool-call-parser, and gpt-oss's harmony format from a template teaching it. Prints one line per check and ends with `N passed,
// M failed`; exit 1 on failure.
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const npmDir = process.env.TESSERA_NPM_DIR ?? path.resolve('.deps/npm');
const require = createRequire(path.join(npmDir, 'node_modules/'));
const OpenAIModule = require('openai');
const OpenAI = OpenAIModule.default ?? OpenAIModule;
const AjvModule = require('ajv');
const Ajv = AjvModule.default ?? AjvModule;

const args = process.argv.slice(2);
const argValue = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const tessera = path.resolve(argValue('--tessera') ?? 'build/tessera');
const keep = args.includes('--keep');

const API_KEY = 'sk-tessera-tools-' + process.pid;
const NAME = 'tiny-tools';
const READY_TIMEOUT_MS = 60_000;
const CHECK_TIMEOUT_MS = 30_000;
const WHOLE_TEST_MS = 120_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let passed = 0;
let failed = 0;
let server = null;
const t0 = Date.now();

function assert(cond, msg) { if (!cond) throw new Error(typeof msg === 'function' ? msg() : msg); }
function assertEq(a, b, what) {
  assert(JSON.stringify(a) === JSON.stringify(b),
    () => `${what}: ${JSON.stringify(a)?.slice(0, 800)} !== ${JSON.stringify(b)?.slice(0, 800)}`);
}

function logTail(n = 15) {
  try { return fs.readFileSync(server.logPath, 'utf8').split('\n').slice(-n - 1).join('\n  '); } catch { return ''; }
}

async function check(name, fn) {
  const start = Date.now();
  let timer;
  try {
    await Promise.race([Promise.resolve().then(fn), new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error(`timed out after ${CHECK_TIMEOUT_MS / 1000}s`)), CHECK_TIMEOUT_MS);
    })]);
  } catch (e) {
    failed++;
    let msg = e?.stack?.split('\n').slice(0, 2).join(' | ') ?? String(e);
    if (e instanceof OpenAI.APIError) msg = `${e.constructor.name} status=${e.status} error=${JSON.stringify(e.error)}`;
    console.log(`FAIL ${name}: ${msg.slice(0, 3000)}`);
    if (server) console.log('  --- server log tail ---\n  ' + logTail());
    return false;
  } finally {
    clearTimeout(timer);
  }
  passed++;
  const dt = (Date.now() - start) / 1000;
  console.log(`PASS ${name}${dt >= 1 ? ` (${dt.toFixed(1)}s)` : ''}`);
  return true;
}

function startServer(model, workdir, extra) {
  const logPath = path.join(workdir, 'serve.log');
  const portFile = path.join(workdir, 'port.json');
  fs.rmSync(portFile, { force: true });  // a previous server's
  const log = fs.openSync(logPath, 'w');
  const proc = spawn(tessera, ['serve', '--model', model, '--served-model-name', NAME, '--host', '127.0.0.1',
    '--port', '0', '--grpc-port', '-1', '--port-file', portFile, '--api-key', API_KEY, ...extra],
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
      try { if ((await fetch(`http://127.0.0.1:${s.port}/ready`)).status === 200) return; } catch { /* not yet */ }
    }
    await sleep(50);
  }
  throw new Error(`not ready within ${READY_TIMEOUT_MS / 1000}s`);
}

async function stopServer(s) {
  if (!s || s.exited) return s?.exited;
  const done = new Promise((r) => s.proc.once('exit', (code, signal) => r({ code, signal })));
  s.proc.kill('SIGTERM');
  const res = await Promise.race([done, sleep(15_000).then(() => null)]);
  if (res) return res;
  s.proc.kill('SIGKILL');
  return done;
}

// The single token id of `text` (through the server's own /tokenize).
async function tokenId(text) {
  const r = await fetch(`http://127.0.0.1:${server.port}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: NAME, prompt: text, add_special_tokens: false }),
  });
  const body = await r.json();
  assert(r.status === 200 && body.tokens?.length === 1, () => `/tokenize ${text}: ${JSON.stringify(body)}`);
  return body.tokens[0];
}

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'] },
  },
}, { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];

// Schemas whose every instance is short (what a random model writes under them stays bounded).
const BOUNDED_TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] },
      days: { type: 'integer', minimum: 1, maximum: 14 } }, required: ['city'] },
  },
}, { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];

const CALLS_PREFIX = 'Let me check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", ' +
  '"days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';
const WANT_CALLS = [['get_weather', { city: 'Paris', days: 2 }], ['get_time', {}]];

function expectCalls(message, what) {
  const calls = message.tool_calls ?? [];
  assertEq(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), WANT_CALLS, `${what} tool calls`);
  for (const c of calls) {
    assert(c.type === 'function' && /^call_[A-Za-z0-9]{8,}$/.test(c.id), () => `${what} call: ${JSON.stringify(c)}`);
  }
  assert(new Set(calls.map((c) => c.id)).size === calls.length, `${what}: ids not unique`);
}

const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(BOUNDED_TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const forcedReq = (toolChoice, extra) => ({
  model: NAME, tools: BOUNDED_TOOLS, tool_choice: toolChoice, temperature: 0, max_tokens: 200,
  messages: [{ role: 'user', content: 'Weather and time in Paris?' }], ...extra,
});
const expectForced = (c, what, name) => {
  const calls = c.message.tool_calls ?? [];
  assert(calls.length >= 1, () => `${what}: no tool calls: ${JSON.stringify(c)}`);
  if (name) assertEq(calls.length, 1, `${what}: calls under a named function`);
  for (const call of calls) {
    assert(!name || call.function.name === name, () => `${what}: called ${call.function.name}`);
    const validate = validators[call.function.name];
    assert(validate, () => `${what}: unknown function ${call.function.name}`);
    assert(validate(JSON.parse(call.function.arguments)),
      () => `${what}: ${call.function.arguments} fails its schema: ${ajv.errorsText(validate.errors)}`);
    assert(call.type === 'function' && /^call_[A-Za-z0-9]{8,}$/.test(call.id), () => `${what}: ${JSON.stringify(call)}`);
  }
  assert(!c.message.content, () => `${what}: content ${JSON.stringify(c.message.content)}`);
  assertEq(c.finish_reason, 'tool_calls', `${what} finish_reason`);
  return calls.map((x) => [x.function.name, x.function.arguments]);
};

async function runChecks(client) {
  const imEnd = await tokenId('<|im_end|>');
  const forced = (assistantPrefix, bias) => ({
    model: NAME, tools: TOOLS, temperature: 0, max_tokens: 4,
    messages: [{ role: 'user', content: 'Weather and time in Paris?' }, { role: 'assistant', content: assistantPrefix }],
    continue_final_message: true, add_generation_prompt: false, echo: true, logit_bias: bias,
  });

  await check('non-stream: message.tool_calls parsed by the client, content outside the calls', async () => {
    const r = await client.chat.completions.create(forced(CALLS_PREFIX, { [imEnd]: 100 }));
    const c = r.choices[0];
    expectCalls(c.message, 'non-stream');
    assertEq(c.message.content, 'Let me check both.', 'content');
    assertEq(c.finish_reason, 'tool_calls', 'finish_reason');
  });

  await check('stream: the client\'s stream helper accumulates the tool-call deltas', async () => {
    const rawDeltas = [];
    const stream = client.chat.completions.stream({ ...forced(CALLS_PREFIX, { [imEnd]: 100 }), stream: true });
    stream.on('chunk', (chunk) => { for (const ch of chunk.choices) rawDeltas.push(ch); });
    const doneArgs = [];
    stream.on('tool_calls.function.arguments.done', (e) => doneArgs.push([e.name, JSON.parse(e.arguments)]));
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    expectCalls(c.message, 'stream');
    assertEq(c.message.content, 'Let me check both.', 'streamed content');
    assertEq(c.finish_reason, 'tool_calls', 'finish_reason');
    assertEq(doneArgs, WANT_CALLS, 'arguments.done events');
    // OpenAI's shape: the first delta of a call names it with empty arguments.
    const firsts = rawDeltas.flatMap((ch) => ch.delta?.tool_calls ?? []).filter((t) => t.id);
    assertEq(firsts.map((t) => [t.index, t.type, t.function.name, t.function.arguments]),
      [[0, 'function', 'get_weather', ''], [1, 'function', 'get_time', '']], 'first call deltas');
    for (const ch of rawDeltas) {
      assert(!(ch.delta?.content ?? '').includes('<'), () => `markup streamed as content: ${JSON.stringify(ch)}`);
    }
  });

  await check('tool_choice "none": the markup stays content', async () => {
    const r = await client.chat.completions.create({ ...forced(CALLS_PREFIX, { [imEnd]: 100 }), tool_choice: 'none' });
    assertEq(r.choices[0].message.content, CALLS_PREFIX, 'content');
    assert(!r.choices[0].message.tool_calls?.length, 'no tool calls');
    assertEq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  });

  // tool_choice "required" / named: the grammar forces the calls, so even a
  // random-weight model answers with tool calls whose arguments follow the
  // schemas (checked by ajv). Bounded schemas keep the outputs short; +100 on
  // <|im_end|> ends the output as soon as the grammar allows it.
  for (const [label, toolChoice, name] of [['"required"', 'required', null],
    ['named', { type: 'function', function: { name: 'get_weather' } }, 'get_weather']]) {
    await check(`tool_choice ${label}: grammar-forced calls, non-stream and stream agree`, async () => {
      for (const extra of [{ logit_bias: { [imEnd]: 100 } }, { parallel_tool_calls: false }]) {
        const r = await client.chat.completions.create(forcedReq(toolChoice, extra));
        const want = expectForced(r.choices[0], `${label} ${JSON.stringify(extra)}`, name);
        const final = await client.chat.completions.stream({ ...forcedReq(toolChoice, extra), stream: true })
          .finalChatCompletion();
        assertEq(expectForced(final.choices[0], `${label} stream`, name), want, 'streamed calls');
      }
    });
  }

  await check('tool_choice required/named: bad tool schema or a second constraint -> 400 naming the field', async () => {
    const cases = [
      [{ tool_choice: 'required', tools: [BOUNDED_TOOLS[0], { type: 'function', function: { name: 'bad',
        parameters: { type: 'object', properties: { x: { not: { type: 'null' } } } } } }] },
      'tools[1].function.parameters'],
      [{ tool_choice: 'required', response_format: { type: 'json_object' } }, 'response_format'],
      [{ tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
    ];
    for (const [extra, param] of cases) {
      try {
        await client.chat.completions.create({ ...forcedReq('required'), ...extra });
        throw new Error(`accepted ${JSON.stringify(extra)}`);
      } catch (e) {
        assert(e instanceof OpenAI.BadRequestError && e.param === param, () => `${JSON.stringify(extra)}: ${e}`);
      }
    }
  });

  await check('multi-turn: assistant tool_calls and role tool messages render through the template', async () => {
    const messages = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"temp_c": 21}' },
    ];
    const r = await client.chat.completions.create({ model: NAME, tools: TOOLS, max_tokens: 2, temperature: 0, messages });
    assert(r.usage.prompt_tokens > 20, () => `usage ${JSON.stringify(r.usage)}`);
    // The prompt the model saw, through /tokenize + /detokenize.
    const post = async (route, body) => (await fetch(`http://127.0.0.1:${server.port}${route}`, {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify(body) })).json();
    const { tokens } = await post('/tokenize', { model: NAME, messages, tools: TOOLS });
    const { prompt } = await post('/detokenize', { model: NAME, tokens });
    for (const want of ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
      '<tool_response>\n{"temp_c": 21}\n</tool_response>']) {
      assert(prompt.includes(want), () => `prompt lacks ${want}: ${prompt.slice(-400)}`);
    }
  });

  const hello = await tokenId('Hello');
  const THINK = '<think>\nThe user wants the weather.\n</think>\n\n';
  await check('reasoning_content: non-stream and stream (--reasoning-parser qwen3)', async () => {
    const req = { ...forced(THINK, { [hello]: 100 }), max_tokens: 2 };
    delete req.tools;
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    assertEq(m.reasoning_content, '\nThe user wants the weather.\n', 'reasoning_content');
    assertEq(m.content, 'HelloHello', 'content (blank lines after </think> dropped)');
    assertEq(r.choices[0].finish_reason, 'length', 'finish_reason');
    let reasoning = '';
    let content = '';
    const stream = await client.chat.completions.create({ ...req, stream: true });
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        reasoning += ch.delta?.reasoning_content ?? '';
        content += ch.delta?.content ?? '';
      }
    }
    assertEq([reasoning, content], [m.reasoning_content, m.content], 'streamed reasoning/content');
  });
}

// gpt-oss's harmony format, from a template that teaches it (the model's
// tokenizer_config.json rewritten: a harmony layout whose final assistant message
// is rendered raw, so continue_final_message + echo carry harmony markup). The
// markup is ordinary text in this tokenizer, the harmony parser reads text; the
// request keeps special tokens, so the forced <|im_end|> is cut as a stop string.
const HARMONY_TEMPLATE =
  "{#- harmony layout: <|start|>ROLE<|channel|>CHANNEL<|message|>BODY<|end|> -#}" +
  "{%- for m in messages -%}{%- if m.role == 'assistant' and loop.last and not add_generation_prompt -%}" +
  '<|start|>assistant{{ m.content }}{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>' +
  '{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}';

async function harmonyChecks(model, workdir) {
  const dir = path.join(workdir, 'tiny-harmony');
  fs.cpSync(model, dir, { recursive: true });
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  cfg.chat_template = HARMONY_TEMPLATE;
  fs.writeFileSync(cfgPath, JSON.stringify(cfg));
  server = startServer(dir, workdir, []);
  if (!(await check('harmony: server becomes ready', () => waitReady(server)))) return;
  const client = new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0,
    timeout: 30_000 });
  await check('harmony: parsers chosen from the chat template', () => {
    assert(/tool calls openai \(from the chat template\), reasoning openai_gptoss/.test(
      fs.readFileSync(server.logPath, 'utf8')), () => logTail());
  });
  const imEnd = await tokenId('<|im_end|>');
  const req = (prefix, tools) => ({
    model: NAME, ...(tools ? { tools: TOOLS } : {}), temperature: 0, max_tokens: 4, echo: true,
    logit_bias: { [imEnd]: 100 }, stop: ['<|im_end|>'], continue_final_message: true, add_generation_prompt: false,
    messages: [{ role: 'user', content: 'Weather and time in Paris?' }, { role: 'assistant', content: prefix }],
  });
  const streamed = async (r) => {
    let reasoning = '';
    const stream = client.chat.completions.stream({ ...r, stream: true });
    stream.on('chunk', (chunk) => { for (const ch of chunk.choices) reasoning += ch.delta?.reasoning_content ?? ''; });
    const final = await stream.finalChatCompletion();
    return [reasoning, final.choices[0]];
  };
  await check('harmony: analysis -> reasoning_content, commentary to=functions.* -> tool_calls (non-stream, stream)', async () => {
    const r = req('<|channel|>analysis<|message|>Need both.<|end|><|start|>assistant to=functions.get_weather' +
      '<|channel|>commentary json<|message|>{"city": "Paris", "days": 2}<|call|><|start|>assistant<|channel|>' +
      'commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>', true);
    const c = (await client.chat.completions.create(r)).choices[0];
    expectCalls(c.message, 'harmony non-stream');
    assertEq([c.message.reasoning_content, c.message.content, c.finish_reason], ['Need both.', null, 'tool_calls'],
      'reasoning, content, finish_reason');
    const [reasoning, s] = await streamed(r);
    expectCalls(s.message, 'harmony stream');
    assertEq([reasoning, s.message.content || null, s.finish_reason], ['Need both.', null, 'tool_calls'], 'streamed');
  });
  await check('harmony: final channel -> content (non-stream, stream)', async () => {
    const r = req('<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.', false);
    const c = (await client.chat.completions.create(r)).choices[0];
    assertEq([c.message.reasoning_content, c.message.content, c.finish_reason], ['Easy.', 'Sunny.', 'stop'], 'message');
    const [reasoning, s] = await streamed(r);
    assertEq([reasoning, s.message.content], ['Easy.', 'Sunny.'], 'streamed');
  });
  await stopServer(server);
}

async function main() {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-e2e-tools-'));
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
        { stdio: ['ignore', 'ignore', 'pipe'], timeout: 60_000 });
    });
    server = startServer(model, workdir, ['--reasoning-parser', 'qwen3']);
    if (await check('server becomes ready', () => waitReady(server))) {
      const client = new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0,
        timeout: 30_000 });
      await check('server log: hermes tool-call parser from the chat template', () => {
        assert(/tool calls hermes \(from the chat template\), reasoning qwen3/.test(fs.readFileSync(server.logPath, 'utf8')),
          () => logTail());
      });
      await runChecks(client);
    }
    await stopServer(server);
    // The other formats, chosen by --tool-call-parser over the template's hermes.
    for (const [parser, prefix] of [
      ['llama3_json', '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; ' +
        '{"name": "get_time", "parameters": {}}'],
      ['mistral', 'Let me check both. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", ' +
        '"days": 2}}, {"name": "get_time", "arguments": {}}]'],
    ]) {
      server = startServer(model, workdir, ['--tool-call-parser', parser]);
      if (!(await check(`--tool-call-parser ${parser}: server becomes ready`, () => waitReady(server)))) {
        await stopServer(server);
        continue;
      }
      const client = new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${server.port}/v1`, maxRetries: 0,
        timeout: 30_000 });
      await check(`--tool-call-parser ${parser}: non-stream and stream tool calls`, async () => {
        const imEnd = await tokenId('<|im_end|>');
        const req = {
          model: NAME, tools: TOOLS, temperature: 0, max_tokens: 4, echo: true, logit_bias: { [imEnd]: 100 },
          messages: [{ role: 'user', content: 'Weather and time in Paris?' }, { role: 'assistant', content: prefix }],
          continue_final_message: true, add_generation_prompt: false,
        };
        const r = await client.chat.completions.create(req);
        expectCalls(r.choices[0].message, `${parser} non-stream`);
        assertEq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
        const final = await client.chat.completions.stream({ ...req, stream: true }).finalChatCompletion();
        expectCalls(final.choices[0].message, `${parser} stream`);
        // The role chunk carries content "" (as vLLM's), so the accumulated content is "" where the message has null.
        assertEq(final.choices[0].message.content || null, r.choices[0].message.content, 'content');
      });
      await check(`--tool-call-parser ${parser}: tool_choice "required" forced in its format`, async () => {
        const req = forcedReq('required', { parallel_tool_calls: false });
        const want = expectForced((await client.chat.completions.create(req)).choices[0], parser, null);
        const final = await client.chat.completions.stream({ ...req, stream: true }).finalChatCompletion();
        assertEq(expectForced(final.choices[0], `${parser} stream`, null), want, 'streamed calls');
      });
      await stopServer(server);
    }
    await harmonyChecks(model, workdir);
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

main().catch((e) => {
  console.log(`FAIL unexpected: ${e?.stack ?? e}`);
  if (server && !server.exited) server.proc.kill('SIGKILL');
  process.exit(1);
});
