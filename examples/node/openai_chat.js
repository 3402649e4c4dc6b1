#!/usr/bin/env node
// performer-serve's OpenAI-compatible HTTP API (--http_port) from the
// official `openai` client: streams a chat answer, or with --completion a
// plain completion of the prompt.
//
//   cd examples/node && npm install
//   node openai_chat.js "Why is the sky blue?"
//   node openai_chat.js --base-url http://localhost:8000/v1 --completion --max-tokens 64 "Once"
//
// The text goes to stdout as it arrives; the finish reason and token counts
// go to stderr. A refused request prints the HTTP status and the server's
// message and exits 1.
'use strict';

const { parseArgs } = require('node:util');
const { OpenAI, APIError } = require('openai');

function options() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      'base-url': { type: 'string', default: 'http://localhost:8000/v1' },
      model: { type: 'string', default: 'performer-fortunes' },
      'max-tokens': { type: 'string', default: '100' },
      temperature: { type: 'string', default: '0' },
      completion: { type: 'boolean', default: false },
    },
  });
  return { ...values, prompt: positionals.join(' ') || 'Why is the sky blue?' };
}

async function main() {
  const o = options();
  // The server checks the key only with --auth_tokens_file.
  const client = new OpenAI({ baseURL: o['base-url'], apiKey: process.env.OPENAI_API_KEY || 'none' });
  const request = {
    model: o.model,
    max_tokens: Number(o['max-tokens']),
    temperature: Number(o.temperature),
    stream: true,
    stream_options: { include_usage: true },
  };
  const stream = o.completion
    ? await client.completions.create({ ...request, prompt: o.prompt })
    : await client.chat.completions.create({ ...request, messages: [{ role: 'user', content: o.prompt }] });
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      process.stdout.write(o.completion ? choice.text : choice.delta.content || '');
      if (choice.finish_reason) process.stderr.write(`finish_reason: ${choice.finish_reason}\n`);
    }
    if (chunk.usage) {
      process.stderr.write(`${chunk.usage.prompt_tokens} prompt tokens ` +
        `(${chunk.usage.prompt_tokens_details.cached_tokens} cached), ` +
        `${chunk.usage.completion_tokens} generated tokens\n`);
    }
  }
  process.stdout.write('\n');
}

main().catch((e) => {
  if (e instanceof APIError) {
    process.stderr.write(`error: HTTP ${e.status}: ${e.message}\n`);
  } else {
    process.stderr.write(`error: ${e.message}\n`);
  }
  process.exit(1);
});
