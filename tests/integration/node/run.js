'use strict';
// ctest entry point of the Node.js tests: runs every *.test.js here with
// `node --test`, within RUN_TIMEOUT_MS. The fixtures are the repository's
// own (tests/fixtures/performer): missing, they are an error, not a skip.
// A skipped or todo test fails the run.
const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const RUN_TIMEOUT_MS = 240000;

const fixtures = path.join(__dirname, '..', '..', 'fixtures', 'performer');
if (!fs.existsSync(fixtures)) {
  console.error(`error: fixture folder ${fixtures} is missing from the checkout`);
  process.exit(2);
}
try {
  require.resolve('@grpc/grpc-js');
  require.resolve('@grpc/proto-loader');
  require.resolve('openai');
} catch (e) {
  console.error(`error: @grpc/grpc-js / @grpc/proto-loader / openai not found (run npm ci; NODE_PATH=${process.env.NODE_PATH || ''})`);
  process.exit(2);
}
const files = fs.readdirSync(__dirname).filter((f) => f.endsWith('.test.js')).sort()
    .map((f) => path.join(__dirname, f));
// TAP on stdout (kept to look for skips), shown as it is.
const result = childProcess.spawnSync(process.execPath, ['--test', '--test-reporter=tap', ...files], {
  stdio: ['ignore', 'pipe', 'inherit'],
  timeout: RUN_TIMEOUT_MS,
  killSignal: 'SIGKILL',
  encoding: 'utf8',
  maxBuffer: 64 * 1024 * 1024,
});
process.stdout.write(result.stdout || '');
if (result.error) {
  console.error(result.error.code === 'ETIMEDOUT' ?
    `error: the Node tests did not finish within ${RUN_TIMEOUT_MS / 1000} s` : result.error);
  process.exit(1);
}
const skipped = /^# (skipped|todo) ([1-9]\d*)$/m.exec(result.stdout || '');
if (result.status === 0 && skipped) {
  console.error(`error: ${skipped[2]} test(s) ${skipped[1]}: no integration test may skip`);
  process.exit(1);
}
process.exit(result.status === null ? 1 : result.status);
