#!/usr/bin/env node
// End-to-end: OpenAI's Responses API of `tessera serve` (two instances, and
// a router in front of both) driven by the official `openai` npm client:
// responses.create, .stream (parsed and checked by the SDK's own
// ResponseStream), .retrieve, .delete, .inputItems.list, .cancel; a
// previous_response_id continuation whose output equals the same
// conversation sent in full (greedy, token for token); a function tool round
// trip with function_call_output; json_schema output validated by ajv;
// errors in OpenAI's shape naming the field.
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/test_openai_responses.mjs --tessera build/tessera [--keep]
//
// The model is a tiny random-weight qwen3 checkpoint (real tokenizer and chat
// template; hermes tool calls from the template). A random model calls no
// tool by itself: a named tool_choice makes the grammar force the call.
// Prints one line per check and ends with `N passed, M failed`; exit 1 on
// failure, 77 when the SDK is not installed.
import fs from 'node:fs';

import { assert, assertEq, commandLine, serveSuite, waitReady } from './e2e_util.mjs';

const { tessera, keep, npmDir, require } = commandLine();
let OpenAIModule, AjvModule;
try {
  OpenAIModule = require('openai');
  AjvModule = require('ajv');
} catch (e) {
  console.log(`SKIP: the npm oracles are not installed in ${npmDir} (${e.message.split('\n')[0]})`);
  process.exit(77);
}
const OpenAI = OpenAIModule.default ?? OpenAIModule;
const Ajv = AjvModule.default ?? AjvModule;

const API_KEY = 'sk-tessera-responses-' + process.pid;
const NAME = 'tiny-responses';
const READY_TIMEOUT_MS = 60_000;
const { check, start, synthTinyQwen3, run } = serveSuite({
  tessera, keep, apiKey: API_KEY, wholeTestMs: 120_000, tmpPrefix: 'tessera-e2e-responses-',
  describe: (e) => (e instanceof OpenAI.APIError
    ? `${e.constructor.name} status=${e.status} error=${JSON.stringify(e.error)}`
    : e?.stack?.split('\n').slice(0, 3).join(' | ') ?? String(e)),
});
const client = (port) => new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0,
  timeout: 30_000 });

const WEATHER = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] },
  days: { type: 'integer', minimum: 1, maximum: 14 } }, required: ['city'], additionalProperties: false };
const TOOLS = [{ type: 'function', name: 'get_weather', description: 'Current weather in a city', parameters: WEATHER,
  strict: true }];
const ajv = new Ajv({ strict: false });
const validWeather = ajv.compile(WEATHER);

// Expects the SDK to refuse the call with `Class` whose error names `param`.
async function expectError(promise, Class, param) {
  try {
    await promise;
  } catch (e) {
    assert(e instanceof Class, () => `expected ${Class.name}, got ${e}`);
    if (param) assertEq(e.error?.param ?? e.param, param, 'param');
    return;
  }
  throw new Error(`accepted; expected ${Class.name} naming ${param}`);
}

async function conversationChecks(c, label) {
  await check(`${label}: previous_response_id continues exactly as the full conversation sent at once (greedy)`,
    async () => {
      const base = { model: NAME, max_output_tokens: 6, temperature: 0 };
      const first = await c.responses.create({ ...base, instructions: 'Be brief.', input: 'Hello there' });
      assertEq([first.status, first.incomplete_details?.reason], ['incomplete', 'max_output_tokens'], 'first status');
      const next = await c.responses.create({ ...base, instructions: 'Be brief.', previous_response_id: first.id,
        input: [{ role: 'user', content: 'And then?' }] });
      assertEq(next.previous_response_id, first.id, 'previous_response_id echoed');
      const full = await c.responses.create({ ...base, instructions: 'Be brief.', store: false, input: [
        { role: 'user', content: 'Hello there' }, ...first.output, { role: 'user', content: 'And then?' }] });
      assertEq(next.usage.input_tokens, full.usage.input_tokens, 'same prompt');
      assertEq(next.output_text, full.output_text, 'same continuation');
      const d = full.usage.input_tokens_details;  // the cache waterfall: by source and by reason
      const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
      assertEq([sum(d.cached_tokens_details), sum(d.cached_tokens_details) + sum(d.computed_tokens_details)],
        [d.cached_tokens, full.usage.input_tokens], 'the cache waterfall sums to cached and prompt tokens');
      assert(next.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens,
        'the continuation holds the first turn');
      await expectError(c.responses.retrieve(full.id), OpenAI.NotFoundError);  // store: false
    });

  await check(`${label}: a function tool round trip (forced call, then function_call_output)`, async () => {
    const forced = { model: NAME, max_output_tokens: 60, temperature: 0, input: 'Weather?', tools: TOOLS,
      tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false };
    const call = await c.responses.create(forced);
    const calls = call.output.filter((o) => o.type === 'function_call');
    assertEq(calls.length, 1, 'function_call items');
    const fc = calls[0];
    assert(/^call_/.test(fc.call_id) && fc.name === 'get_weather' && fc.status === 'completed', () => JSON.stringify(fc));
    const args = JSON.parse(fc.arguments);
    assert(validWeather(args), () => `arguments ${fc.arguments}: ${ajv.errorsText(validWeather.errors)}`);
    let streamedArgs = '';
    const stream = c.responses.stream(forced);
    stream.on('response.function_call_arguments.delta', (e) => { streamedArgs += e.delta; });
    const streamed = (await stream.finalResponse()).output.filter((o) => o.type === 'function_call');
    assertEq(streamed.map((o) => [o.name, o.arguments, o.status]), [[fc.name, fc.arguments, 'completed']],
      'streamed call');
    assertEq(streamedArgs, fc.arguments, 'streamed argument deltas');
    const answer = await c.responses.create({ model: NAME, max_output_tokens: 3, temperature: 0,
      previous_response_id: call.id, tools: TOOLS, tool_choice: 'none',
      input: [{ type: 'function_call_output', call_id: fc.call_id, output: '{"temp_c": 21}' }] });
    assertEq(answer.output.map((o) => o.type), ['message'], 'answer items');
    const full = await c.responses.create({ model: NAME, max_output_tokens: 3, temperature: 0, store: false,
      tools: TOOLS, tool_choice: 'none', input: [{ role: 'user', content: 'Weather?' }, fc,
        { type: 'function_call_output', call_id: fc.call_id, output: '{"temp_c": 21}' }] });
    assertEq([answer.usage.input_tokens, answer.output_text], [full.usage.input_tokens, full.output_text],
      'the same as the round trip sent in full');
    assert(answer.usage.input_tokens > call.usage.input_tokens + 5, 'the call and its result are in the prompt');
    const items = await c.responses.inputItems.list(answer.id);
    assertEq(items.data.map((i) => [i.type, i.call_id]), [['function_call_output', fc.call_id]], 'input items');
  });
}

await run(async (workdir) => {
  const model = `${workdir}/tiny-qwen3`;
  const keyFile = `${workdir}/internal.key`;
  fs.writeFileSync(keyFile, `internal-${process.pid}-secret-key\n`);
  if (!(await synthTinyQwen3(model))) return;
  const argv = ['--model', model, '--served-model-name', NAME, '--internal-api-key-file', keyFile, '--kv-cache-mb',
    '64'];
  const a = start('instance-a', workdir, argv);
  const b = start('instance-b', workdir, argv);
  if (!(await check('instances become ready', async () => {
    await waitReady(a, READY_TIMEOUT_MS);
    await waitReady(b, READY_TIMEOUT_MS);
  }))) throw new Error('no instance');
  const router = start('router', workdir, ['--role', 'router', '--decode-instances',
    `127.0.0.1:${a.port},127.0.0.1:${b.port}`, '--internal-api-key-file', keyFile, '--router-poll-interval', '0.1']);
  const c = client(a.port);

  await check('instance: create, stream (the SDK checks every event), retrieve, input items, delete', async () => {
    const req = { model: NAME, input: 'Tell me a story.', instructions: 'Be brief.', max_output_tokens: 5,
      temperature: 0, metadata: { run: 'e2e' } };
    const r = await c.responses.create(req);
    assert(/^resp_[A-Za-z0-9]{8,}$/.test(r.id), () => `id ${r.id}`);
    assertEq([r.object, r.model, r.status, r.store, r.metadata, r.output.length, r.output[0].type],
      ['response', NAME, 'incomplete', true, { run: 'e2e' }, 1, 'message'], 'response');
    assertEq([r.usage.output_tokens, r.usage.total_tokens], [5, r.usage.input_tokens + 5], 'usage');
    assert(r.output_text.length > 0 && r.output_text === r.output[0].content[0].text, 'output_text');
    const types = [];
    const stream = c.responses.stream(req);
    stream.on('event', (e) => types.push(e.type));
    let text = '';
    stream.on('response.output_text.delta', (e) => { text += e.delta; });
    const final = await stream.finalResponse();
    assertEq(final.output_text, r.output_text, 'streamed text (greedy)');
    assertEq(text, r.output_text, 'deltas');
    assertEq(types.filter((t, i) => t !== types[i - 1]), ['response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
      'response.incomplete'], 'event order');
    const got = await c.responses.retrieve(r.id);
    assertEq([got.id, got.status, got.output_text], [r.id, 'incomplete', r.output_text], 'retrieve');
    const items = await c.responses.inputItems.list(r.id);
    assertEq(items.data.map((i) => [i.type, i.role, i.content[0].text]), [['message', 'user', 'Tell me a story.']],
      'input items');
    await c.responses.delete(r.id);
    await expectError(c.responses.retrieve(r.id), OpenAI.NotFoundError);
    await expectError(c.responses.create({ ...req, previous_response_id: r.id }), OpenAI.NotFoundError,
      'previous_response_id');
  });

  await check('instance: input items pagination (order, limit, after) and the list object', async () => {
    const input = ['a', 'b', 'c'].map((t) => ({ role: 'user', content: t }));
    const r = await c.responses.create({ model: NAME, input, max_output_tokens: 1 });
    const texts = (page) => page.data.map((i) => i.content[0].text);
    const desc = await c.responses.inputItems.list(r.id, { limit: 2 });
    assertEq([texts(desc), desc.has_more], [['c', 'b'], true], 'desc page');
    const asc = await c.responses.inputItems.list(r.id, { order: 'asc', after: desc.data[0].id });
    assertEq([texts(asc), asc.has_more], [[], false], 'after the last (asc)');
    const rest = await c.responses.inputItems.list(r.id, { after: desc.data[1].id });
    assertEq([texts(rest), rest.has_more], [['a'], false], 'next desc page');
    const all = [];
    for await (const item of c.responses.inputItems.list(r.id, { limit: 1 })) all.push(item.content[0].text);
    assertEq(all, ['c', 'b', 'a'], 'auto-pagination');
    const raw = await (await fetch(`http://127.0.0.1:${a.port}/v1/responses/${r.id}/input_items?order=asc&limit=2`,
      { headers: { authorization: `Bearer ${API_KEY}` } })).json();
    assertEq([raw.object, raw.first_id, raw.last_id, raw.has_more], ['list', raw.data[0].id, raw.data[1].id, true],
      'list object');
  });

  await check('instance: json_schema output (text.format) follows the schema', async () => {
    const r = await c.responses.create({ model: NAME, input: 'Pick a city.', max_output_tokens: 60, temperature: 0,
      text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER, strict: true } } });
    assertEq(r.status, 'completed', 'status');
    const v = JSON.parse(r.output_text);
    assert(validWeather(v), () => `${r.output_text}: ${ajv.errorsText(validWeather.errors)}`);
  });

  await check('instance: cancel aborts an in-flight response; a finished one is refused', async () => {
    const stream = c.responses.stream({ model: NAME, input: 'Go on forever.', max_output_tokens: 3000 });
    let id = null;
    let cancelled = null;
    stream.on('response.output_text.delta', () => {
      if (id === null || cancelled) return;
      cancelled = c.responses.cancel(id);
    });
    stream.on('response.created', (e) => { id = e.response.id; });
    const final = await stream.finalResponse();
    const snapshot = await cancelled;
    assertEq([snapshot.id, snapshot.status], [id, 'cancelled'], 'cancel answer');
    assertEq(final.status, 'cancelled', 'final status');
    assert(final.usage.output_tokens < 3000, 'stopped early');
    assertEq((await c.responses.retrieve(id)).status, 'cancelled', 'stored');
    await expectError(c.responses.cancel(id), OpenAI.BadRequestError);
  });

  await check('instance: errors in OpenAI\'s shape naming the field', async () => {
    const base = { model: NAME, input: 'x', max_output_tokens: 2 };
    await expectError(c.responses.create({ ...base, tools: [{ type: 'web_search' }] }), OpenAI.BadRequestError,
      'tools[0].type');
    await expectError(c.responses.create({ ...base, input: [{ role: 'user', content: [{ type: 'input_image',
      image_url: 'https://example.com/a.png' }] }] }), OpenAI.BadRequestError, 'input[0].content[0].type');
    await expectError(c.responses.create({ ...base, background: true }), OpenAI.BadRequestError, 'background');
    await expectError(c.responses.create({ ...base, previous_response_id: 'resp_nope' }), OpenAI.NotFoundError,
      'previous_response_id');
    await expectError(c.responses.retrieve('resp_nope'), OpenAI.NotFoundError);
    await expectError(c.responses.delete('resp_nope'), OpenAI.NotFoundError);
  });

  await conversationChecks(c, 'instance');
  if (await check('router becomes ready', () => waitReady(router, READY_TIMEOUT_MS))) {
    const rc = client(router.port);
    await conversationChecks(rc, 'router over two instances');
    await check('router: by-id requests find the instance that holds the response, as the client\'s owner', async () => {
      // Made on each instance directly with the client's key: the router names that key's tenant to
      // the instance it relays to, so the owner is the same either way.
      const made = [];
      for (const s of [a, b]) {
        made.push(await client(s.port).responses.create({ model: NAME, input: 'x', max_output_tokens: 1 }));
      }
      for (const r of made) {
        assertEq((await rc.responses.retrieve(r.id)).id, r.id, 'retrieve');
        assertEq((await rc.responses.inputItems.list(r.id)).data.length, 1, 'input items');
      }
      const next = await rc.responses.create({ model: NAME, input: 'y', max_output_tokens: 1,
        previous_response_id: made[1].id });
      assert(next.usage.input_tokens > made[1].usage.input_tokens, 'continued on the instance holding it');
      await rc.responses.delete(made[1].id);
      await expectError(rc.responses.retrieve(made[1].id), OpenAI.NotFoundError);
      // Another owner's: one made with the internal key (the router's own owner) is not the client's.
      const internal = fs.readFileSync(keyFile, 'utf8').trim();
      const theirs = await new OpenAI({ apiKey: internal, baseURL: `http://127.0.0.1:${a.port}/v1`, maxRetries: 0 })
        .responses.create({ model: NAME, input: 'x', max_output_tokens: 1 });
      await expectError(rc.responses.retrieve(theirs.id), OpenAI.NotFoundError);
      await expectError(c.responses.retrieve(theirs.id), OpenAI.NotFoundError);
    });
  }
});
