'use strict';
// performer-serve's HTTP API (--http_port) from the official `openai` npm
// client: models, completions whole and streamed (the same greedy text as
// gRPC's Generate), chat streamed through the default model's chat
// template, cached prompt tokens, the Responses API continuing a stored
// conversation (previous_response_id: only the new input is prefilled),
// and the client's typed errors
// (NotFoundError, BadRequestError naming the field, AuthenticationError with
// bearer tokens on, RateLimitError on overload). Run through run.js.

const {test, before, after} = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const {OpenAI, NotFoundError, BadRequestError, AuthenticationError, RateLimitError,
  ConflictError} = require('openai');
const h = require('./harness');

const MODELS = path.resolve(__dirname, '..', '..', '..', 'models');
const MODEL = 'performer-fortunes';
const TOKEN = 'node-openai-test-token-0123456789';
const TIMEOUT = {timeout: 120000};
const HOOK_TIMEOUT = {timeout: 150000};

// A server of the default model with an HTTP port; resolves {server, http}.
async function startHttp(flags, name) {
  const server = new h.Server(MODELS, ['--http_port=0', ...flags], name);
  const httpPortFile = path.join(server.workdir, 'http_port');
  server.flags.push(`--http_port_file=${httpPortFile}`);
  await server.start();
  const port = Number(fs.readFileSync(httpPortFile, 'utf8').trim());
  return {server, baseURL: `http://127.0.0.1:${port}/v1`};
}

function openai(baseURL, apiKey = 'unused') {
  return new OpenAI({baseURL, apiKey, maxRetries: 0, timeout: 60000});
}

let plain;
let grpcClient;

before(async () => {
  plain = await startHttp(['--max_batch=8'], 'openai');
  const v1 = h.loadGeneration();
  grpcClient = new v1.Generation(plain.server.address, h.grpc.credentials.createInsecure());
}, HOOK_TIMEOUT);

after(async () => {
  if (grpcClient) grpcClient.close();
  if (plain) assert.equal(await plain.server.stop(), 0, plain.server.log);
}, HOOK_TIMEOUT);

test('models.list and models.retrieve; an unknown model is NotFoundError', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  assert.deepEqual(ids, [MODEL]);
  const model = await client.models.retrieve(MODEL);
  assert.equal(model.id, MODEL);
  assert.equal(model.object, 'model');
  await assert.rejects(client.models.retrieve('no-such-model'), NotFoundError);
});

test('completions, whole and streamed, equal gRPC greedy text', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  const prompt = 'Q:\tWhat is the meaning of life?\nA:\t';
  const grpc = await h.call(grpcClient, 'Generate',
      {model: MODEL, prompt_text: prompt, max_new_tokens: 40, temperature: 0});
  const whole = await client.completions.create(
      {model: MODEL, prompt, max_tokens: 40, temperature: 0});
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].text, grpc.text);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 40);
  assert.equal(whole.usage.prompt_tokens, grpc.usage.prompt_tokens);
  assert.ok(whole.id.startsWith('cmpl-'), whole.id);

  const stream = await client.completions.create({model: MODEL, prompt, max_tokens: 40,
    temperature: 0, stream: true, stream_options: {include_usage: true}});
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, grpc.text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 40);
  // The same prompt again: its state comes from the prefix cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(usage));
});

test('seeded sampling is the same over HTTP and gRPC', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  const prompt = 'The ';
  const grpc = await h.call(grpcClient, 'Generate', {model: MODEL, prompt_text: prompt,
    max_new_tokens: 30, temperature: 0.8, seed: 1234});
  const http = await client.completions.create(
      {model: MODEL, prompt, max_tokens: 30, temperature: 0.8, seed: 1234});
  assert.equal(http.choices[0].text, grpc.text);
});

test('chat streamed through the chat template', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  const stream = await client.chat.completions.create({model: MODEL, stream: true,
    messages: [{role: 'user', content: 'Why did the chicken cross the road?'}],
    max_tokens: 60, temperature: 0});
  let content = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      content += choice.delta.content || '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.ok(content.length > 0);
  // The template's stop string ("\n") ends the answer unless the length does.
  assert.ok(!content.includes('\n'), JSON.stringify(content));
  assert.ok(finish === 'stop' || finish === 'length', finish);
  const whole = await client.chat.completions.create({model: MODEL,
    messages: [{role: 'user', content: 'Why did the chicken cross the road?'}],
    max_tokens: 60, temperature: 0});
  assert.equal(whole.choices[0].message.content, content);
});

test('bad requests are BadRequestError naming the field', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  await assert.rejects(client.completions.create({model: MODEL, prompt: 'a', max_tokens: -3}),
      (e) => e instanceof BadRequestError && e.param === 'max_tokens');
  await assert.rejects(client.completions.create({model: MODEL, prompt: 'a', n: 2}),
      (e) => e instanceof BadRequestError && e.param === 'n');
  // A value the engine refuses is named by the parameter the client sent.
  await assert.rejects(client.completions.create({model: MODEL, prompt: 'a', max_tokens: 999999}),
      (e) => e instanceof BadRequestError && e.param === 'max_tokens' &&
          /^max_tokens: 999999 exceeds/.test(e.error.message));
  await assert.rejects(client.completions.create({model: 'nope', prompt: 'a'}),
      (e) => e instanceof NotFoundError && /\(see GET \/v1\/models\)/.test(e.message));
  await assert.rejects(client.chat.completions.create({model: MODEL,
    messages: [{role: 'tool', content: 'x', tool_call_id: 'c'}]}),
  (e) => e instanceof BadRequestError && /messages\[0\]/.test(e.message));
});

test('bearer tokens: none or a wrong one is AuthenticationError', TIMEOUT, async () => {
  const dir = h.makeTempDir('openai-tokens');
  const tokens = path.join(dir, 'tokens');
  fs.writeFileSync(tokens, `${TOKEN} node\n`, {mode: 0o600});
  const secured = await startHttp([`--auth_tokens_file=${tokens}`], 'openai-auth');
  try {
    await assert.rejects(openai(secured.baseURL, 'wrong-token-0123456789abcdef').completions
        .create({model: MODEL, prompt: 'a', max_tokens: 2}), AuthenticationError);
    await assert.rejects(openai(secured.baseURL, 'wrong-token-0123456789abcdef').models.retrieve(
        MODEL), AuthenticationError);
    const ok = await openai(secured.baseURL, TOKEN).completions.create(
        {model: MODEL, prompt: 'a', max_tokens: 2});
    assert.equal(ok.usage.completion_tokens, 2);
  } finally {
    assert.equal(await secured.server.stop(), 0, secured.server.log);
  }
});

test('overload is RateLimitError', TIMEOUT, async () => {
  const busy = await startHttp(['--max_batch=1', '--max_queue=1', '--step_delay_ms=20'],
      'openai-busy');
  try {
    const client = openai(busy.baseURL);
    const results = await Promise.allSettled(Array.from({length: 6}, () =>
      client.completions.create({model: MODEL, prompt: 'a', max_tokens: 20, temperature: 0})));
    const limited = results.filter((r) => r.status === 'rejected');
    assert.ok(limited.length > 0, 'no request was refused');
    for (const r of limited) {
      assert.ok(r.reason instanceof RateLimitError, String(r.reason));
      assert.match(r.reason.headers.get('retry-after') || '', /^[1-9]\d*$/);
    }
    assert.ok(results.some((r) => r.status === 'fulfilled'));
  } finally {
    assert.equal(await busy.server.stop(), 0, busy.server.log);
  }
});

test('responses: a stored conversation continues from its state', TIMEOUT, async () => {
  const client = openai(plain.baseURL);
  const first = await client.responses.create({model: MODEL, input: 'What is a computer?',
    instructions: 'Answer in one line.', max_output_tokens: 40, temperature: 0});
  assert.equal(first.object, 'response');
  assert.ok(first.id.startsWith('resp_'), first.id);
  assert.ok(first.output_text.length > 0);
  assert.equal(first.usage.input_tokens_details.cached_tokens, 0);
  const history = first.usage.input_tokens + first.usage.output_tokens;

  const second = await client.responses.create({model: MODEL, input: 'And a mouse?',
    previous_response_id: first.id, max_output_tokens: 40, temperature: 0});
  assert.equal(second.previous_response_id, first.id);
  // The history came from the session's state: only the new input was
  // prefilled (the previous turn's last token is fed with it).
  assert.ok(second.usage.input_tokens_details.cached_tokens >= history - 1,
      JSON.stringify({history, usage: second.usage}));
  assert.ok(second.usage.input_tokens > history);

  const again = await client.responses.retrieve(second.id);
  assert.equal(again.output_text, second.output_text);
  // The first response was continued already: its state is the second's.
  await assert.rejects(client.responses.create({model: MODEL, input: 'x',
    previous_response_id: first.id}), ConflictError);
  await assert.rejects(client.responses.create({model: MODEL, input: 'x',
    previous_response_id: 'resp_unknown'}), NotFoundError);

  // Streamed: typed events, the text in deltas, the last one completes it.
  const stream = await client.responses.create({model: MODEL, input: 'And a keyboard?',
    previous_response_id: second.id, max_output_tokens: 30, temperature: 0, stream: true});
  let text = '';
  const types = [];
  let last = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
    last = event;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  assert.equal(last.response.output[0].content[0].text, text);
  assert.ok(last.response.usage.input_tokens_details.cached_tokens > history);

  await client.responses.delete(last.response.id);
  await assert.rejects(client.responses.retrieve(last.response.id), NotFoundError);
});
