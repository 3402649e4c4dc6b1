#!/usr/bin/env node
// Streams a completion from performer-serve with @grpc/grpc-js, loading the
// API from proto/performer/v1/generation.proto at run time (no generated code).
//
//   cd examples/node && npm install
//   node generate.js "Once upon a time"
//   node generate.js --target localhost:50051 --model my-lm --max_new_tokens 64 \
//       --temperature 0.8 --seed 7 "Hello"
//   node generate.js --list
//   node generate.js --session chat-1 --create_session "Hi."
//   node generate.js --session chat-1 "And then?"
//
// The text goes to stdout as it arrives; the finish reason, token counts and
// timings go to stderr. A failed call prints the server's status and message
// and exits 1. PROTO_DIR overrides where the .proto files are found.
'use strict';

const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = process.env.PROTO_DIR || path.join(__dirname, '..', '..', 'proto');

function loadApi() {
  const definition = protoLoader.loadSync('performer/v1/generation.proto', {
    includeDirs: [PROTO_DIR],
    keepCase: true, // field names as in the .proto: max_new_tokens, finish_reason...
    longs: Number,
    enums: String, // enum values by name: "FINISH_REASON_LENGTH"
    defaults: true,
  });
  return grpc.loadPackageDefinition(definition).performer.v1;
}

function options() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      target: { type: 'string', default: 'localhost:50051' },
      model: { type: 'string', default: '' },
      max_new_tokens: { type: 'string', default: '64' },
      temperature: { type: 'string' },
      top_p: { type: 'string' },
      seed: { type: 'string' },
      timeout: { type: 'string', default: '60' },
      session: { type: 'string', default: '' },
      create_session: { type: 'boolean', default: false },
      list: { type: 'boolean', default: false },
    },
  });
  return { ...values, prompt: positionals.join(' ') };
}

function fail(error) {
  process.stderr.write(`error: ${grpc.status[error.code]}: ${error.details}\n`);
  process.exitCode = 1;
}

function main() {
  const opts = options();
  const api = loadApi();
  const client = new api.Generation(opts.target, grpc.credentials.createInsecure());
  const deadline = new Date(Date.now() + Number(opts.timeout) * 1000);

  if (opts.list) {
    client.ListModels({}, { deadline }, (error, listing) => {
      if (error) return fail(error);
      for (const m of listing.models) {
        const mark = m.name === listing.default_model ? '  (default)' : '';
        console.log(`${m.name}  ${m.kind}  vocab=${m.vocab_size}  ` +
          `max_len=${m.max_sequence_length}  tokenizer=${m.tokenizer || '-'}  ` +
          `state=${m.state_bytes_per_sequence} B/seq${mark}`);
      }
      client.close();
    });
    return;
  }

  const request = {
    model: opts.model,
    prompt_text: opts.prompt,
    max_new_tokens: Number(opts.max_new_tokens),
    session_id: opts.session,
    create_session: opts.create_session,
  };
  // Optional fields: left out means the model's generation_config.json default.
  if (opts.temperature !== undefined) request.temperature = Number(opts.temperature);
  if (opts.top_p !== undefined) request.top_p = Number(opts.top_p);
  if (opts.seed !== undefined) request.seed = Number(opts.seed);

  // A proxy in front of several replicas routes a session's turns to the
  // replica that holds it by this header.
  const metadata = new grpc.Metadata();
  if (opts.session) metadata.set('x-session-id', opts.session);
  let last = null;
  const call = client.GenerateStream(request, metadata, { deadline });
  call.on('data', (message) => {
    process.stdout.write(message.text);
    last = message;
  });
  call.on('error', (error) => {
    fail(error);
    client.close();
  });
  call.on('end', () => {
    process.stdout.write('\n');
    if (last) {
      const t = last.timings;
      process.stderr.write(`[${last.finish_reason}: ${last.usage.prompt_tokens} prompt + ` +
        `${last.usage.generated_tokens} generated tokens, first token ` +
        `${(1000 * t.time_to_first_token_seconds).toFixed(0)} ms, total ` +
        `${(1000 * t.total_seconds).toFixed(0)} ms]\n`);
      if (opts.session) {
        process.stderr.write(`[session ${opts.session} at ${last.session_position} tokens, ` +
          `${last.usage.cached_prompt_tokens} of the prompt from its state]\n`);
      }
    }
    client.close();
  });
}

main();
