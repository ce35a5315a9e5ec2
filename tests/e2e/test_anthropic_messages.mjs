#!/usr/bin/env node
// End-to-end: the Anthropic Messages API of `tessera serve` (and of a router
// in front of it) driven by the official `@anthropic-ai/sdk` npm client:
// messages, streaming parsed by the SDK's own MessageStream, a tool-use round
// trip forced by tool_choice, thinking blocks, count_tokens, x-api-key and
// Bearer auth, cache_control (retention, the default) with the prefix
// cache's share in usage.cache_read_input_tokens, errors in
// Anthropic's shape naming the field.
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_anthropic_messages.mjs --tessera build/tessera [--keep]
//
// The model is a tiny random-weight qwen3 checkpoint (real tokenizer and chat
// template; hermes tool calls from the template, --reasoning-parser qwen3).
// A random model calls no tool by itself: tool_choice {"type":"tool"} makes
// the grammar force the call, and ajv validates its input. Prints one line
// per check and ends with `N passed, M failed`; exit 1 on failure, 77 when
// the SDK is not installed.
import fs from 'node:fs';

import { assert, assertEq, commandLine, serveSuite, waitReady } from './e2e_util.mjs';

const { tessera, keep, npmDir, require } = commandLine();
let AnthropicModule, AjvModule;
try {
  AnthropicModule = require('@anthropic-ai/sdk');
  AjvModule = require('ajv');
} catch (e) {
  console.log(`SKIP: the npm oracles are not installed in ${npmDir} (${e.message.split('\n')[0]})`);
  process.exit(77);
}
const Anthropic = AnthropicModule.default ?? AnthropicModule;
const Ajv = AjvModule.default ?? AjvModule;

const API_KEY = 'sk-tessera-anthropic-' + process.pid;
const NAME = 'tiny-messages';
const READY_TIMEOUT_MS = 60_000;
const { check, start, synthTinyQwen3, run } = serveSuite({
  tessera, keep, apiKey: API_KEY, wholeTestMs: 120_000, tmpPrefix: 'tessera-e2e-anthropic-',
  describe: (e) => (e instanceof Anthropic.APIError
    ? `${e.constructor.name} status=${e.status} error=${JSON.stringify(e.error)}`
    : e?.stack?.split('\n').slice(0, 2).join(' | ') ?? String(e)),
});

const client = (port, extra = {}) => new Anthropic({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${port}`,
  maxRetries: 0, timeout: 30_000, ...extra });

const TOOLS = [{
  name: 'get_weather', description: 'Current weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] },
    days: { type: 'integer', minimum: 1, maximum: 14 } }, required: ['city'] },
}, { name: 'get_time', input_schema: { type: 'object', properties: {} } }];
const ajv = new Ajv({ strict: false });
const validWeather = ajv.compile(TOOLS[0].input_schema);
const ASK = [{ role: 'user', content: 'Weather in Paris?' }];

// Expects the SDK to refuse the call with `Class` whose Anthropic error names `what`.
async function expectError(promise, Class, type, what) {
  try {
    await promise;
  } catch (e) {
    assert(e instanceof Class, () => `expected ${Class.name}, got ${e}`);
    assertEq(e.error?.type, 'error', 'error body type');
    assertEq(e.error?.error?.type, type, 'error type');
    assert(!what || e.error.error.message.includes(what), () => `message lacks ${what}: ${e.error.error.message}`);
    return;
  }
  throw new Error(`accepted; expected ${Class.name} naming ${what}`);
}

async function basicChecks(c, port, label) {
  await check(`${label}: messages.create and messages.stream agree (greedy), usage adds up with count_tokens`, async () => {
    const req = { model: NAME, max_tokens: 4, temperature: 0, system: 'Be brief.', messages: ASK };
    const m = await c.messages.create(req);
    assert(/^msg_[A-Za-z0-9]{8,}$/.test(m.id), () => `id ${m.id}`);
    assertEq([m.type, m.role, m.model, m.stop_reason, m.stop_sequence, m.content.length, m.content[0].type],
      ['message', 'assistant', NAME, 'max_tokens', null, 1, 'text'], 'message');
    assertEq(m.usage.output_tokens, 4, 'output_tokens');
    assertEq(m.usage.cache_creation_input_tokens, 0, 'cache_creation_input_tokens');
    const { input_tokens } = await c.messages.countTokens({ model: NAME, system: 'Be brief.', messages: ASK });
    assertEq(m.usage.input_tokens + m.usage.cache_read_input_tokens, input_tokens, 'prompt tokens vs count_tokens');
    const types = [];
    const stream = c.messages.stream(req);
    let text = '';
    stream.on('text', (t) => { text += t; });
    stream.on('streamEvent', (e) => types.push(e.type));
    const final = await stream.finalMessage();
    assertEq(final.content, m.content, 'streamed content');
    assertEq(text, m.content[0].text, 'text events');
    assertEq([final.stop_reason, final.usage.output_tokens], ['max_tokens', 4], 'streamed stop/usage');
    assertEq(types.filter((t, i) => t !== types[i - 1]),
      ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta',
        'message_stop'], 'event order');
  });

  await check(`${label}: tool use forced by tool_choice, then the tool_result round trip`, async () => {
    const req = { model: NAME, max_tokens: 60, temperature: 0, tools: TOOLS, messages: ASK,
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } };
    const m = await c.messages.create(req);
    assertEq(m.stop_reason, 'tool_use', 'stop_reason');
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assertEq(uses.length, 1, 'tool_use blocks');
    const use = uses[0];
    assert(/^toolu_[A-Za-z0-9]{8,}$/.test(use.id) && use.name === 'get_weather', () => JSON.stringify(use));
    assert(validWeather(use.input), () => `input ${JSON.stringify(use.input)}: ${ajv.errorsText(validWeather.errors)}`);
    const final = await c.messages.stream(req).finalMessage();
    const streamed = final.content.filter((b) => b.type === 'tool_use');
    assertEq(streamed.map((b) => [b.name, b.input]), [[use.name, use.input]], 'streamed tool_use');
    assertEq(final.stop_reason, 'tool_use', 'streamed stop_reason');
    const next = await c.messages.create({ model: NAME, max_tokens: 2, temperature: 0, tools: TOOLS,
      tool_choice: { type: 'none' },
      messages: [...ASK, { role: 'assistant', content: m.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c": 21}' }] }] });
    assertEq(next.stop_reason, 'max_tokens', 'round trip answered');
    assert(next.usage.input_tokens + next.usage.cache_read_input_tokens >
      m.usage.input_tokens + m.usage.cache_read_input_tokens, 'the round trip prompt holds the call and its result');
  });

  await check(`${label}: errors in Anthropic's shape naming the field`, async () => {
    const base = { model: NAME, max_tokens: 2, messages: ASK };
    await expectError(c.messages.create({ ...base, frequency_penalty: 1 }), Anthropic.BadRequestError,
      'invalid_request_error', 'frequency_penalty');
    await expectError(c.messages.create({ ...base, messages: [{ role: 'user', content: [{ type: 'image',
      source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }), Anthropic.BadRequestError,
    'invalid_request_error', 'messages[0].content[0].type');
    await expectError(c.messages.create({ ...base, model: 'claude-nope' }), Anthropic.NotFoundError, 'not_found_error');
    await expectError(client(port, { apiKey: 'wrong' }).messages.create(base),
      Anthropic.AuthenticationError, 'authentication_error');
    await expectError(c.messages.countTokens({ model: NAME, messages: ASK, max_tokens: 5 }), Anthropic.BadRequestError,
      'invalid_request_error', 'max_tokens');
  });
}

await run(async (workdir) => {
  const model = `${workdir}/tiny-qwen3`;
  const keyFile = `${workdir}/internal.key`;
  fs.writeFileSync(keyFile, `internal-${process.pid}-secret-key\n`);
  if (!(await synthTinyQwen3(model))) return;
  const inst = start('instance', workdir, ['--model', model, '--served-model-name', NAME, '--reasoning-parser',
    'qwen3', '--internal-api-key-file', keyFile]);
  if (!(await check('instance becomes ready', () => waitReady(inst, READY_TIMEOUT_MS)))) throw new Error('no instance');
  const router = start('router', workdir, ['--role', 'router', '--decode-instances', `127.0.0.1:${inst.port}`,
    '--internal-api-key-file', keyFile, '--router-poll-interval', '0.1']);
  const c = client(inst.port);
  await basicChecks(c, inst.port, 'instance');

  await check('instance: thinking blocks (qwen3 reasoning parser), streamed and not', async () => {
    // The prefill opens <think>: what the model writes next is reasoning.
    const req = { model: NAME, max_tokens: 3, temperature: 0,
      messages: [...ASK, { role: 'assistant', content: '<think>\n' }] };
    const m = await c.messages.create(req);
    assertEq(m.content.map((b) => b.type), ['thinking'], 'blocks');
    assert(m.content[0].thinking.length > 0 && m.content[0].signature === '', () => JSON.stringify(m.content));
    const final = await c.messages.stream(req).finalMessage();
    assertEq(final.content, m.content, 'streamed thinking');
    await expectError(c.messages.create({ ...req, max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 1024 } }),
      Anthropic.BadRequestError, 'invalid_request_error', 'thinking.budget_tokens');
  });

  await check('instance: cache_control retains the prefix (the default); a repeat is read from the prefix cache',
    async () => {
      const system = [{ type: 'text', text: 'You are a weather assistant. '.repeat(12),
        cache_control: { type: 'ephemeral', ttl: '5m' } }];
      const req = { model: NAME, max_tokens: 1, temperature: 0, system, messages: ASK };
      const first = await c.messages.create(req);
      const second = await c.messages.create(req);
      const total = (u) => u.input_tokens + u.cache_read_input_tokens;
      assertEq(total(second.usage), total(first.usage), 'same prompt');
      assert(second.usage.cache_read_input_tokens >= 64, () => `usage ${JSON.stringify(second.usage)}`);
      const d = second.usage.tessera_cache_details;  // the cache waterfall
      const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
      assertEq([d.cached_tokens_details.pool, sum(d.cached_tokens_details) + sum(d.computed_tokens_details)],
        [second.usage.cache_read_input_tokens, total(second.usage)], 'the waterfall: read from the pool, sums');
      await expectError(c.messages.create({ ...req, system: [{ ...system[0], cache_control: { type: 'ephemeral',
        ttl: '2h' } }] }), Anthropic.BadRequestError, 'invalid_request_error', 'system[0].cache_control.ttl');
    });

  await check('instance: Bearer auth too, and the anthropic-version header', async () => {
    const r = await fetch(`http://127.0.0.1:${inst.port}/v1/messages/count_tokens`, {
      method: 'POST', body: JSON.stringify({ model: NAME, messages: ASK }),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}`,
        'anthropic-version': '2023-06-01' } });
    assertEq(r.status, 200, 'status');
    assert((await r.json()).input_tokens > 0, 'input_tokens');
    const bad = await fetch(`http://127.0.0.1:${inst.port}/v1/messages`, { method: 'POST', body: '{}',
      headers: { 'content-type': 'application/json', 'x-api-key': 'nope' } });
    assertEq([bad.status, (await bad.json()).error.type], [401, 'authentication_error'], 'bad x-api-key');
  });

  if (await check('router becomes ready', () => waitReady(router, READY_TIMEOUT_MS))) await basicChecks(client(router.port), router.port, 'router');
});
