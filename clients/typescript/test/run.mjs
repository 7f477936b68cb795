// `npm test`: one real `om serve --embedded` for the whole run (test/om-server.ts), then Node's test runner
// over the compiled test files (`npm run pretest` checks the schema and compiles them first).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const tests = join(dirname(dirname(fileURLToPath(import.meta.url))), 'build', 'test');
const { startOmServer } = await import(join(tests, 'om-server.js'));

const files = readdirSync(tests)
  .filter((name) => name.endsWith('.test.js'))
  .map((name) => join(tests, name));
const server = await startOmServer();
let status = 1;
try {
  const run = spawnSync(process.execPath, ['--test', ...process.argv.slice(2), ...files], {
    stdio: 'inherit',
    env: { ...process.env, OM_TEST_URL: server.url },
  });
  status = run.status ?? 1;
} finally {
  await server.stop();
}
process.exit(status);
