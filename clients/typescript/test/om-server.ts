// A real `om serve --embedded` for the tests: SQLite in a temporary folder, an in-process Celery worker,
// the keyless local model (om-local/extractive) with small thresholds so a few dozen turns are observed
// and reflected, on a free loopback port. The Python is $OM_PYTHON, else the repository's .venv (what
// scripts/env.sh creates), else python3.
//
// test/run.mjs starts one for the whole run and hands it to each test file as OM_TEST_URL; a test file run
// on its own starts its own.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const KEY = 'ts-key-alpha';
export const OTHER_KEY = 'ts-key-beta';

/** The deployment profile: small budgets, so observation and reflection happen within the tests. */
export const PROFILE = {
  model: 'om-local/extractive',
  observation: { messageTokens: 400, bufferTokens: 0.25, bufferActivation: 0.8, blockAfter: 1.5 },
  reflection: { observationTokens: 1500, bufferActivation: 0.5, blockAfter: 1.2 },
};

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const REPOSITORY = resolve(PACKAGE, '..', '..');

function python(): string {
  if (process.env['OM_PYTHON']) return process.env['OM_PYTHON'];
  const venv = join(REPOSITORY, '.venv', 'bin', 'python');
  return existsSync(venv) ? venv : 'python3';
}

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? done(address.port) : fail(new Error('no port'))));
    });
  });
}

export interface RunningServer {
  url: string;
  stop(): Promise<void>;
}

export async function startOmServer(timeoutMs = 120_000): Promise<RunningServer> {
  const folder = mkdtempSync(join(tmpdir(), 'om-ts-'));
  const profile = join(folder, 'profile.json');
  writeFileSync(profile, JSON.stringify(PROFILE));
  const port = await freePort();
  const log = join(folder, 'serve.log');
  // a developer's own OM_* settings must not reach the test server
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('OM_')));
  const out = openSync(log, 'w');
  const child: ChildProcess = spawn(python(), ['-m', 'om_api.cli', 'serve', '--embedded'], {
    cwd: folder,
    env: {
      ...env,
      OM_HOST: '127.0.0.1',
      OM_PORT: String(port),
      OM_DATABASE_URL: `sqlite:///${join(folder, 'om.sqlite3')}`,
      OM_API_KEYS: `${KEY}=ts-alpha,${OTHER_KEY}=ts-beta`,
      OM_PROFILE: profile,
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
    },
    stdio: ['ignore', out, out],
  });
  const url = `http://127.0.0.1:${port}`;
  const logTail = () => readFileSync(log, 'utf8').split('\n').slice(-40).join('\n');
  let exited: number | null = null;
  child.once('exit', (code) => {
    exited = code ?? -1;
  });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited !== null) throw new Error(`om serve exited with ${exited}:\n${logTail()}`);
    try {
      const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
      if (response.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`om serve did not answer within ${timeoutMs} ms:\n${logTail()}`);
    }
    await new Promise((r) => setTimeout(r, 150));
  }
  return {
    url,
    async stop() {
      if (exited === null) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
        await gone;
        clearTimeout(killer);
      }
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

/** The server a test file talks to: the run's (OM_TEST_URL), or one of its own, stopped after it. */
export async function omServer(after: (fn: () => Promise<void>) => void): Promise<string> {
  const shared = process.env['OM_TEST_URL'];
  if (shared) return shared;
  const server = await startOmServer();
  after(() => server.stop());
  return server.url;
}

/** A thread id no other test uses. */
export function uniqueId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Poll `check` until it returns something other than undefined or false (generous deadline, no fixed sleeps). */
export async function until<T>(
  check: () => Promise<T | undefined | false>,
  what: string,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
