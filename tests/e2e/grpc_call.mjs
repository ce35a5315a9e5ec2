// A gRPC client for the Python e2e tests (they are stdlib-only): runs calls
// on tessera.v1.Tessera with the real @grpc/grpc-js client and prints one
// JSON line per call. Not a test by itself (tests/e2e/test_*.mjs are).
//
//   TESSERA_NPM_DIR=.deps/npm node tests/e2e/grpc_call.mjs CALLS.json
//
// CALLS.json: [{"target": "127.0.0.1:PORT", "method": "Generate" |
// "GenerateStream" | "Tokenize" | "ListModels" | "Health", "request": {...},
// "cancel_after": N (streams: cancel after N messages), "metadata": {key:
// value} (optional), "service": "kv" (optional: tessera.kv.v1.KvTransfer, the
// KV transfer control plane, methods OpenTransfer | ReleaseTransfer)}, ...],
// run in turn.
// Each output line: {"code": gRPC status code (0 OK), "details", "response"
// (unary) or "messages" (stream), "trailers" (the trailing metadata, on success); with "timed": true in the call, "ms": its
// duration}. Bounded: 60 s per call.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const npmDir = process.env.TESSERA_NPM_DIR ?? path.join(repo, '.deps/npm');
const require = createRequire(path.join(path.resolve(npmDir), 'node_modules/'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const def = protoLoader.loadSync(['proto/tessera.proto', 'proto/health.proto', 'proto/kv.proto'], {
  includeDirs: [repo], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const pkg = grpc.loadPackageDefinition(def);
const clients = new Map();
function client(target, health, kv) {
  const key = `${health ? 'h' : kv ? 'k' : 't'}${target}`;
  if (!clients.has(key)) {
    const Ctor = health ? pkg.grpc.health.v1.Health : kv ? pkg.tessera.kv.v1.KvTransfer : pkg.tessera.v1.Tessera;
    clients.set(key, new Ctor(target, grpc.credentials.createInsecure()));
  }
  return clients.get(key);
}
const opts = () => ({ deadline: new Date(Date.now() + 60_000) });
// Bytes fields as arrays of numbers (JSON has no Buffer).
const plain = (v) => JSON.parse(JSON.stringify(v, (k, x) => (x && x.type === 'Buffer' ? x.data : x)));

function metadata(c) {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(c.metadata ?? {})) md.set(k, v);
  return md;
}

// The call's trailing metadata (e.g. tessera-receipt), once its status arrived.
function trailersOf(call) {
  return new Promise((resolve) => {
    call.on('status', (s) => resolve(s.metadata ? s.metadata.getMap() : {}));
    setTimeout(() => resolve({}), 5_000).unref();
  });
}

function run(c) {
  return new Promise((resolve) => {
    if (c.method === 'GenerateStream') {
      const messages = [];
      const call = client(c.target).GenerateStream(c.request, metadata(c), opts());
      const trailers = trailersOf(call);
      call.on('data', (m) => {
        messages.push(plain(m));
        if (c.cancel_after && messages.length >= c.cancel_after) call.cancel();
      });
      call.on('error', async (err) => resolve({ code: err.code, details: err.details, messages, trailers: await trailers }));
      call.on('end', async () => resolve({ code: 0, details: '', messages, trailers: await trailers }));
      return;
    }
    const health = c.method === 'Health';
    let trailers = null;
    const call = client(c.target, health, c.service === 'kv')[health ? 'Check' : c.method](c.request, metadata(c), opts(), async (err, resp) =>
      resolve(err ? { code: err.code, details: err.details }
                  : { code: 0, details: '', response: plain(resp), trailers: await trailers }));
    trailers = trailersOf(call);
  });
}

const calls = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
for (const c of calls) {
  const t0 = performance.now();
  const r = await run(c);
  console.log(JSON.stringify(c.timed ? { ...r, ms: Math.round(performance.now() - t0) } : r));
}
// Not process.exit(): stdout to a pipe is written asynchronously and would be cut.
for (const c of clients.values()) c.close();
