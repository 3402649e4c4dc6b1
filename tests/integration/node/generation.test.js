'use strict';
// performer-serve from a Node.js client (@grpc/grpc-js + @grpc/proto-loader):
// ListModels, streaming == unary == fixture greedy tokens, an
// INVALID_ARGUMENT error naming its field, client cancel freeing the slot,
// and grpc.health.v1 Check. Run through run.js (ctest integration.node).

const {test, before, after} = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const h = require('./harness');

const MODEL = 'lm_causal_default';
const SERVICE = 'performer.v1.Generation';
const MAX_BATCH = 4;
// Every test and hook gives up after this long (the calls inside carry
// their own, shorter deadlines).
const TIMEOUT = {timeout: 90000};
// The server's start may take its harness STARTUP_TIMEOUT_MS (120 s).
const HOOK_TIMEOUT = {timeout: 150000};

let server;
let client;
let health;
let io;
let config;

before(async () => {
  const repo = h.makeRepository([MODEL]);
  // A 20 ms step delay keeps the cancelled stream running long enough.
  server = new h.Server(repo, [`--max_batch=${MAX_BATCH}`, '--step_delay_ms=20'], 'node');
  await server.start();
  const v1 = h.loadGeneration();
  client = new v1.Generation(server.address, h.grpc.credentials.createInsecure());
  const healthPkg = h.loadHealth();
  health = new healthPkg.Health(server.address, h.grpc.credentials.createInsecure());
  io = h.loadSafetensors(path.join(h.fixtureDir(MODEL), 'io.safetensors'));
  config = require(path.join(h.fixtureDir(MODEL), 'config.json'));
}, HOOK_TIMEOUT);

after(async () => {
  if (client) client.close();
  if (health) health.close();
  if (server) {
    const code = await server.stop();
    assert.equal(code, 0, `performer-serve exit code after SIGTERM\n${server.log}`);
  }
}, HOOK_TIMEOUT);

test('ListModels and GetModel describe the model', TIMEOUT, async () => {
  const list = await h.call(client, 'ListModels', {});
  assert.equal(list.default_model, MODEL);
  const model = list.models.find((m) => m.name === MODEL);
  assert.ok(model, `no ${MODEL} in ${JSON.stringify(list)}`);
  assert.equal(model.kind, 'MODEL_KIND_DECODER');
  assert.equal(model.vocab_size, config.num_tokens);
  assert.equal(model.max_sequence_length, config.max_seq_len);
  assert.equal(model.tokenizer, '');
  assert.ok(Number(model.state_bytes_per_sequence) > 0, 'state_bytes_per_sequence > 0');
  assert.equal(model.max_sequences, MAX_BATCH);
  assert.equal(model.active_sequences, 0);
  assert.equal(model.ready, true);
  const got = await h.call(client, 'GetModel', {name: MODEL});
  assert.deepEqual(got, model);
});

test('streaming == unary == fixture greedy tokens', TIMEOUT, async () => {
  const prompt = io.prompt.values;
  const expected = io.greedy_tokens.values;
  const request = {
    request_id: 'node-greedy', model: MODEL, prompt_tokens: {ids: prompt},
    max_new_tokens: expected.length, temperature: 0,
  };
  const stream = await h.collectStream(client, request);
  assert.equal(stream.error, null, String(stream.error));
  assert.deepEqual(stream.tokens, expected);
  const last = stream.messages[stream.messages.length - 1];
  assert.equal(last.finish_reason, 'FINISH_REASON_LENGTH');
  assert.equal(last.usage.prompt_tokens, prompt.length);
  assert.equal(last.usage.generated_tokens, expected.length);
  for (const m of stream.messages.slice(0, -1)) {
    assert.equal(m.finish_reason, 'FINISH_REASON_UNSPECIFIED');
  }
  for (const m of stream.messages) assert.equal(m.request_id, 'node-greedy');

  const unary = await h.call(client, 'Generate', {...request, request_id: 'node-greedy-unary'});
  assert.deepEqual(unary.token_ids, expected);
  assert.equal(unary.finish_reason, 'FINISH_REASON_LENGTH');
  assert.equal(unary.usage.generated_tokens, expected.length);
});

test('INVALID_ARGUMENT names the field', TIMEOUT, async () => {
  const bad = {model: MODEL, prompt_tokens: {ids: [1, 2, 3]}, max_new_tokens: 4, temperature: -1};
  await assert.rejects(h.call(client, 'Generate', bad), (err) => {
    assert.equal(err.code, h.grpc.status.INVALID_ARGUMENT, err.details);
    assert.match(err.details, /temperature/);
    return true;
  });
  const stream = await h.collectStream(client, bad);
  assert.ok(stream.error, 'stream should fail');
  assert.equal(stream.error.code, h.grpc.status.INVALID_ARGUMENT);
  assert.match(stream.error.details, /temperature/);
  assert.equal(stream.messages.length, 0);

  const outside = {model: MODEL, prompt_tokens: {ids: [1, config.num_tokens]}, max_new_tokens: 4};
  await assert.rejects(h.call(client, 'Generate', outside), (err) => {
    assert.equal(err.code, h.grpc.status.INVALID_ARGUMENT, err.details);
    assert.match(err.details, /prompt/);
    return true;
  });
  await assert.rejects(h.call(client, 'Generate', {model: 'no_such_model',
    prompt_tokens: {ids: [1]}}), (err) => {
    assert.equal(err.code, h.grpc.status.NOT_FOUND, err.details);
    return true;
  });
});

test('client cancel mid-stream frees the slot', TIMEOUT, async () => {
  const request = {model: MODEL, prompt_tokens: {ids: [5, 17, 42, 8]}, max_new_tokens: 40,
    temperature: 0};
  let cancelled = false;
  const result = await h.collectStream(client, request, {
    onMessage: (stream) => {
      if (!cancelled) {
        cancelled = true;
        stream.cancel();
      }
    },
  });
  assert.ok(cancelled, 'no message before cancel');
  assert.ok(result.error, 'a cancelled stream ends with an error status');
  assert.equal(result.error.code, h.grpc.status.CANCELLED);
  assert.ok(result.tokens.length < 40);

  const start = Date.now();
  let info;
  for (;;) {
    info = await h.call(client, 'GetModel', {name: MODEL});
    if (info.active_sequences === 0 && info.queued_requests === 0) break;
    if (Date.now() - start > 2000) {
      assert.fail(`slot not freed within 2 s: ${JSON.stringify(info)}`);
    }
    await h.sleep(20);
  }
  // Still serving.
  const after = await h.call(client, 'Generate', {model: MODEL, prompt_tokens: {ids: [1, 2]},
    max_new_tokens: 2});
  assert.equal(after.token_ids.length, 2);
});

test('grpc.health.v1 Check reports SERVING', TIMEOUT, async () => {
  for (const service of ['', SERVICE, `${SERVICE}/${MODEL}`]) {
    const response = await h.call(health, 'Check', {service});
    assert.equal(response.status, 'SERVING', `health of '${service}'`);
  }
});
