// Shared pieces of the node e2e tests (not a test itself): the command line,
// assertions, the check runner that prints `PASS name` / `FAIL name: why`, and
// starting, waiting for and stopping `tessera serve` processes.
import { execFileSync, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --tessera PATH (default build/tessera), --keep; `require` for .deps/npm's packages.
export function commandLine() {
  const args = process.argv.slice(2);
  const argValue = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
  const npmDir = process.env.TESSERA_NPM_DIR ?? path.resolve('.deps/npm');
  return { tessera: path.resolve(argValue('--tessera') ?? 'build/tessera'), keep: args.includes('--keep'), npmDir,
    require: createRequire(path.join(npmDir, 'node_modules/')) };
}

export function assert(cond, msg) { if (!cond) throw new Error(typeof msg === 'function' ? msg() : msg); }
export function assertEq(a, b, what) {
  assert(JSON.stringify(a) === JSON.stringify(b),
    () => `${what}: ${JSON.stringify(a)?.slice(0, 800)} !== ${JSON.stringify(b)?.slice(0, 800)}`);
}

// check(name, fn): runs fn under `timeoutMs`, prints the outcome, counts it.
// `describe(e)` words a failure; `context()` is printed after one (log tails).
export function checker({ timeoutMs, describe = (e) => e?.stack?.split('\n').slice(0, 2).join(' | ') ?? String(e),
  context = () => '' }) {
  const counts = { passed: 0, failed: 0 };
  async function check(name, fn) {
    const start = Date.now();
    let timer;
    try {
      await Promise.race([Promise.resolve().then(fn), new Promise((_, rej) => {
        timer = setTimeout(() => rej(new Error(`timed out after ${timeoutMs / 1000}s`)), timeoutMs);
      })]);
    } catch (e) {
      counts.failed++;
      console.log(`FAIL ${name}: ${describe(e).slice(0, 3000)}`);
      const more = context();
      if (more) console.log(more);
      return false;
    } finally {
      clearTimeout(timer);
    }
    counts.passed++;
    const dt = (Date.now() - start) / 1000;
    console.log(`PASS ${name}${dt >= 1 ? ` (${dt.toFixed(1)}s)` : ''}`);
    return true;
  }
  return { check, counts };
}

// `tessera serve` on 127.0.0.1, a free port (read back from --port-file), no gRPC.
export function startServe(tessera, name, workdir, argv) {
  const logPath = path.join(workdir, `${name}.log`);
  const portFile = path.join(workdir, `${name}.port.json`);
  fs.rmSync(portFile, { force: true });
  const log = fs.openSync(logPath, 'w');
  const proc = spawn(tessera, ['serve', '--host', '127.0.0.1', '--port', '0', '--grpc-port', '-1', '--port-file',
    portFile, ...argv], { stdio: ['ignore', log, log] });
  const s = { name, proc, logPath, portFile, port: null, exited: null };
  proc.on('exit', (code, signal) => { s.exited = { code, signal }; });
  fs.closeSync(log);
  return s;
}

export function logTail(s, n = 12) {
  try { return fs.readFileSync(s.logPath, 'utf8').split('\n').slice(-n - 1).join('\n  '); } catch { return ''; }
}

// Until /ready answers 200 (or the process exits, or `timeoutMs` passes).
export async function waitReady(s, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (s.exited) throw new Error(`${s.name} exited ${JSON.stringify(s.exited)}`);
    if (s.port === null) {
      try { s.port = JSON.parse(fs.readFileSync(s.portFile, 'utf8')).http; } catch { /* not yet */ }
    }
    if (s.port !== null) {
      try { if ((await fetch(`http://127.0.0.1:${s.port}/ready`)).status === 200) return; } catch { /* not yet */ }
    }
    await sleep(50);
  }
  throw new Error(`${s.name} not ready within ${timeoutMs / 1000}s`);
}

// SIGTERM, then SIGKILL after 10 s.
export async function stopServe(s) {
  if (!s || s.exited) return;
  const done = new Promise((r) => s.proc.once('exit', r));
  s.proc.kill('SIGTERM');
  if (!(await Promise.race([done.then(() => true), sleep(10_000).then(() => false)]))) s.proc.kill('SIGKILL');
}

// A test of `tessera serve` processes: `check` (a failure prints every
// server's log tail), `start` (serve with --api-key `apiKey`), `synthTinyQwen3`
// (the tiny random-weight qwen3 checkpoint, a check of its own) and
// `run(body)`: body(workdir) under a whole-test watchdog, the servers stopped
// and the work folder removed after it (kept with --keep), then the summary
// line and the exit code.
export function serveSuite({ tessera, keep, apiKey, wholeTestMs, timeoutMs = 30_000, describe, tmpPrefix }) {
  const servers = [];
  const t0 = Date.now();
  const { check, counts } = checker({
    timeoutMs, describe,
    context: () => servers.map((s) => `  --- ${s.name} log tail ---\n  ${logTail(s)}`).join('\n'),
  });
  const start = (name, workdir, argv) => {
    const s = startServe(tessera, name, workdir, ['--api-key', apiKey, ...argv]);
    servers.push(s);
    return s;
  };
  const killAll = () => { for (const s of servers) if (!s.exited) s.proc.kill('SIGKILL'); };
  const synthTinyQwen3 = async (dir) => check('synth tiny qwen3 model', () => {
    execFileSync(tessera, ['synth', '--arch', 'qwen3', '--size', 'tiny', '--dtype', 'f32', '--out', dir],
      { stdio: ['ignore', 'ignore', 'pipe'], timeout: 60_000 });
  });
  async function run(body) {
    const workdir = fs.mkdtempSync(path.join(os.tmpdir(), tmpPrefix));
    const watchdog = setTimeout(() => {
      console.log(`FAIL whole test: over ${wholeTestMs / 1000}s`);
      killAll();
      console.log(`${counts.passed} passed, ${counts.failed + 1} failed`);
      process.exit(1);
    }, wholeTestMs);
    try {
      await body(workdir);
    } catch (e) {
      counts.failed++;
      console.log(`FAIL unexpected: ${e?.stack ?? e}`);
    } finally {
      for (const s of [...servers].reverse()) await stopServe(s);
      clearTimeout(watchdog);
      if (keep) console.log(`kept ${workdir}`);
      else fs.rmSync(workdir, { recursive: true, force: true });
    }
    console.log(`(${((Date.now() - t0) / 1000).toFixed(1)}s)`);
    console.log(`${counts.passed} passed, ${counts.failed} failed`);
    process.exit(counts.failed ? 1 : 0);
  }
  return { check, counts, start, synthTinyQwen3, run };
}
