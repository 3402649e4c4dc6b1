'use strict';
// ctest entry point of the Node.js tests: skips (exit 77) when the golden
// fixtures are absent, then runs every *.test.js here with `node --test`.
const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = process.env.PERFORMER_FIXTURES || process.env.PERFORMER_FIXTURES_DEFAULT ||
    path.join(__dirname, '..', '..', '..', '..', 'shared', 'fixtures');
if (!fs.existsSync(path.join(root, 'performer'))) {
  console.log(`SKIP: fixture folder ${path.join(root, 'performer')} is absent (set PERFORMER_FIXTURES)`);
  process.exit(77);
}
try {
  require.resolve('@grpc/grpc-js');
  require.resolve('@grpc/proto-loader');
} catch (e) {
  console.error(`error: @grpc/grpc-js / @grpc/proto-loader not found (run npm ci; NODE_PATH=${process.env.NODE_PATH || ''})`);
  process.exit(2);
}
const files = fs.readdirSync(__dirname).filter((f) => f.endsWith('.test.js')).sort()
    .map((f) => path.join(__dirname, f));
const result = childProcess.spawnSync(process.execPath, ['--test', ...files], {stdio: 'inherit'});
if (result.error) {
  console.error(result.error);
  process.exit(2);
}
process.exit(result.status === null ? 1 : result.status);
