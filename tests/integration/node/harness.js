'use strict';
// Shared helpers of the Node.js integration tests: fixtures (pure-JS
// safetensors reader), a temporary model repository, the performer-serve
// child process (127.0.0.1, --port=0, --port_file) and promise wrappers
// around @grpc/grpc-js calls.
//
// Environment (set by ctest, see ../CMakeLists.txt):
//   PERFORMER_SERVE             the server binary (default <repo>/build/server/performer-serve)
// The fixtures are the repository's own, <repo>/tests/fixtures. Every wait
// has a timeout: calls carry deadlines, the start and the stop give up.
//   PROTO_DIR                   <repo>/proto
//   NODE_PATH                   the node_modules that `npm ci` installed

const childProcess = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const REPO = path.resolve(__dirname, '..', '..', '..');
const STARTUP_TIMEOUT_MS = 120000;
// After SIGKILL, how long stop() waits for the exit to be reported.
const KILL_WAIT_MS = 10000;

function fixturesRoot() {
  return path.join(REPO, 'tests', 'fixtures');
}

function fixtureDir(name) {
  return path.join(fixturesRoot(), 'performer', name);
}

function serverBinary() {
  return process.env.PERFORMER_SERVE || path.join(REPO, 'build', 'server', 'performer-serve');
}

function protoDir() {
  return process.env.PROTO_DIR || path.join(REPO, 'proto');
}

// safetensors: 8-byte little-endian header length, JSON header, raw
// little-endian row-major data. Returns {name: {dtype, shape, values}}.
function loadSafetensors(file) {
  const buf = fs.readFileSync(file);
  const headerLen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString('utf8'));
  const base = 8 + headerLen;
  const out = {};
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [begin, end] = entry.data_offsets;
    const values = [];
    switch (entry.dtype) {
      case 'I64':
        for (let o = base + begin; o < base + end; o += 8) values.push(Number(buf.readBigInt64LE(o)));
        break;
      case 'I32':
        for (let o = base + begin; o < base + end; o += 4) values.push(buf.readInt32LE(o));
        break;
      case 'F32':
        for (let o = base + begin; o < base + end; o += 4) values.push(buf.readFloatLE(o));
        break;
      case 'BOOL':
        for (let o = base + begin; o < base + end; o += 1) values.push(buf[o] !== 0);
        break;
      default:
        continue;
    }
    out[name] = {dtype: entry.dtype, shape: entry.shape, values};
  }
  return out;
}

const tempDirs = [];
const servers = [];

function makeTempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `performer-it-node-${prefix}-`));
  tempDirs.push(dir);
  return dir;
}

// A model repository holding copies of the named fixture folders.
function makeRepository(cases) {
  const dir = makeTempDir('repo');
  for (const name of cases) {
    const dst = path.join(dir, name);
    fs.mkdirSync(dst);
    for (const f of ['config.json', 'weights.safetensors']) {
      fs.copyFileSync(path.join(fixtureDir(name), f), path.join(dst, f));
    }
  }
  return dir;
}

function loadGeneration() {
  const def = protoLoader.loadSync('performer/v1/generation.proto', {
    includeDirs: [protoDir()],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def).performer.v1;
}

// grpc.health.v1, from a small inline copy of the standard definition.
const HEALTH_PROTO = `
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
}
`;

function loadHealth() {
  const dir = makeTempDir('health');
  const file = path.join(dir, 'health.proto');
  fs.writeFileSync(file, HEALTH_PROTO);
  const def = protoLoader.loadSync(file, {keepCase: true, enums: String, defaults: true});
  return grpc.loadPackageDefinition(def).grpc.health.v1;
}

class Server {
  constructor(repositoryDir, flags = [], name = 'server') {
    this.repositoryDir = repositoryDir;
    this.flags = flags;
    this.name = name;
    this.workdir = makeTempDir(name);
    this.portFile = path.join(this.workdir, 'port');
    this.log = '';
    this.proc = null;
    this.exitCode = undefined;
    this.port = null;
  }

  args() {
    return [`--model_repository=${this.repositoryDir}`, '--host=127.0.0.1', '--port=0',
      `--port_file=${this.portFile}`, '--metrics_port=-1', ...this.flags];
  }

  async start(timeoutMs = STARTUP_TIMEOUT_MS) {
    const bin = serverBinary();
    fs.accessSync(bin, fs.constants.X_OK);
    this.proc = childProcess.spawn(bin, this.args(), {stdio: ['ignore', 'pipe', 'pipe']});
    servers.push(this);
    this.proc.stdout.on('data', (d) => { this.log += d.toString(); });
    this.proc.stderr.on('data', (d) => { this.log += d.toString(); });
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exitCode = code === null ? signal : code;
        resolve(this.exitCode);
      });
    });
    const deadline = Date.now() + timeoutMs;
    let previous = null;
    for (;;) {
      if (this.exitCode !== undefined) {
        throw new Error(`performer-serve exited (${this.exitCode}) before it was ready:\n${this.log}`);
      }
      let port = null;
      try {
        const text = fs.readFileSync(this.portFile, 'utf8').trim();
        if (/^\d+$/.test(text) && Number(text) > 0) port = Number(text);
      } catch (e) { /* not yet */ }
      if (port !== null && port === previous) {
        this.port = port;
        break;
      }
      previous = port;
      if (Date.now() > deadline) {
        this.kill();
        throw new Error(`performer-serve wrote no port file in ${timeoutMs} ms:\n${this.log}`);
      }
      await sleep(50);
    }
    return this;
  }

  get address() {
    return `127.0.0.1:${this.port}`;
  }

  kill() {
    if (this.proc && this.exitCode === undefined) this.proc.kill('SIGKILL');
  }

  // SIGTERM, then SIGKILL after `timeoutMs`; resolves the exit code, or
  // rejects when even SIGKILL brought no exit within KILL_WAIT_MS.
  async stop(timeoutMs = 30000) {
    if (!this.proc) return undefined;
    if (this.exitCode === undefined) {
      this.proc.kill('SIGTERM');
      const timer = setTimeout(() => this.kill(), timeoutMs);
      let giveUp;
      const gaveUp = new Promise((resolve, reject) => {
        giveUp = setTimeout(() => reject(new Error(
            `performer-serve did not exit ${(timeoutMs + KILL_WAIT_MS) / 1000} s after SIGTERM`)),
        timeoutMs + KILL_WAIT_MS);
      });
      try {
        await Promise.race([this.exited, gaveUp]);
      } finally {
        clearTimeout(timer);
        clearTimeout(giveUp);
      }
    }
    return this.exitCode;
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function deadlineIn(seconds) {
  return new Date(Date.now() + seconds * 1000);
}

// Unary call as a promise: resolves the response, rejects with the error.
function call(client, method, request, seconds = 30) {
  return new Promise((resolve, reject) => {
    client[method](request, {deadline: deadlineIn(seconds)}, (err, response) => {
      if (err) reject(err);
      else resolve(response);
    });
  });
}

// Server-streaming call: resolves {messages, error}; onMessage(stream, msg)
// is called for each message. The call's deadline ends it, and a 'status'
// that has not come 10 s after the deadline rejects.
function collectStream(client, request, {seconds = 60, onMessage} = {}) {
  return new Promise((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error(
        `GenerateStream: no status ${seconds + 10} s after the call began`)), (seconds + 10) * 1000);
    const stream = client.GenerateStream(request, {deadline: deadlineIn(seconds)});
    const messages = [];
    let error = null;
    stream.on('data', (msg) => {
      messages.push(msg);
      if (onMessage) onMessage(stream, msg);
    });
    stream.on('error', (err) => { error = err; });
    // 'status' comes once, last; data still buffered in the stream is
    // emitted on process.nextTick, before setImmediate runs.
    stream.on('status', (status) => {
      clearTimeout(guard);
      setImmediate(() => resolve({messages, error, status,
        tokens: messages.flatMap((m) => m.token_ids)}));
    });
  });
}

function cleanup() {
  for (const s of servers) s.kill();
  if (process.env.PERFORMER_KEEP_TEMP) return;
  for (const d of tempDirs) fs.rmSync(d, {recursive: true, force: true});
}

process.on('exit', cleanup);

module.exports = {
  grpc, fixturesRoot, fixtureDir, serverBinary, loadSafetensors, makeRepository, makeTempDir,
  loadGeneration, loadHealth, Server, sleep, call, collectStream, cleanup,
};
