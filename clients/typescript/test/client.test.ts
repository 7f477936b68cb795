// Every route of om's API through the client, against a real `om serve`; the last test checks that the
// calls made here cover every route the committed OpenAPI document has.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { OMClient, OMConnectionError, OMError, type StoredMessage } from '../src/index.js';
import { KEY, OTHER_KEY, omServer, uniqueId, until } from './om-server.js';

const SCHEMA = JSON.parse(readFileSync(new URL('../../openapi.json', import.meta.url), 'utf8')) as {
  paths: Record<string, Record<string, unknown>>;
};

const called = new Set<string>();
const recording: typeof fetch = async (input, init) => {
  const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
  called.add(`${(init?.method ?? 'GET').toUpperCase()} ${url.pathname}`);
  return fetch(input, init);
};

let base: string;
let om: OMClient;

before(async () => {
  base = await omServer(after);
  om = new OMClient({ baseUrl: base, apiKey: KEY, fetch: recording });
});

async function rejects(promise: Promise<unknown>, status: number, code: string): Promise<OMError> {
  const error = await promise.then(
    () => assert.fail(`expected ${status} ${code}`),
    (e: unknown) => e,
  );
  assert.ok(error instanceof OMError, `expected an OMError, got ${String(error)}`);
  assert.equal(error.status, status, error.message);
  assert.equal(error.code, code, error.message);
  return error;
}

describe('threads and messages', () => {
  test('put, get, list and the threads of a resource', async () => {
    const id = uniqueId('thr');
    const resource = uniqueId('user');
    const created = await om.putThread(id, { resource_id: resource, title: 'Trip planning', metadata: { a: 1 } });
    assert.equal(created.thread_id, id);
    assert.equal(created.title, 'Trip planning');
    assert.deepEqual(created.models?.['observer'], ['om-local/extractive']);
    const read = await om.getThread(id);
    assert.equal(read.resource_id, resource);
    assert.equal(read.metadata['a'], 1);
    assert.ok((await om.listThreads({ limit: 500 })).some((t) => t.thread_id === id));
    assert.deepEqual(
      (await om.resourceThreads(resource)).map((t) => t.thread_id),
      [id],
    );
  });

  test('an append is idempotent by message id; other content under a known id is a conflict', async () => {
    const id = uniqueId('app');
    const message = { id: 'm1', role: 'user', content: 'My budget for Japan is 2400 euros.' };
    const first = await om.append(id, [message]);
    assert.deepEqual(
      first.appended.map((a) => a.message_id),
      ['m1'],
    );
    assert.equal(first.parts.at(-1)?.type, 'data-om-status');
    const again = await om.append(id, [message]);
    assert.deepEqual(again.appended, []);
    assert.deepEqual(again.duplicates, ['m1']);
    const conflict = await rejects(om.append(id, [{ ...message, content: 'something else' }]), 409, 'message_conflict');
    assert.equal(conflict.error.code, 'message_conflict');
    const bad = await rejects(om.append(id, [{ id: 'm2', role: 'robot', content: 'x' }]), 422, 'invalid_message');
    assert.equal(bad.details['path'], 'messages[0].role');
  });

  test('a turn appends and returns the context, in om and in OpenAI format', async () => {
    const id = uniqueId('turn');
    const turn = await om.turn(id, [{ id: 'q1', role: 'user', content: 'Where does my sister live?' }]);
    assert.deepEqual(
      turn.appended.map((a) => a.message_id),
      ['q1'],
    );
    const last = turn.messages.at(-1) as unknown as StoredMessage;
    assert.equal(last.id, 'q1');
    assert.deepEqual(last.parts, [{ type: 'text', text: 'Where does my sister live?' }]);
    assert.equal(typeof turn.pending_tokens, 'number');
    const openai = await om.turn(id, [{ id: 'q1', role: 'user', content: 'Where does my sister live?' }], {
      format: 'openai',
      model: 'openai/gpt-5-mini',
    });
    assert.deepEqual(openai.duplicates, ['q1']);
    assert.deepEqual(openai.messages.at(-1), { role: 'user', content: 'Where does my sister live?' });
  });

  test('a reply sent in the background lands before the next turn', async () => {
    const id = uniqueId('bg');
    await om.turn(id, [{ id: 'u1', role: 'user', content: 'hello' }]);
    const reply = om.appendInBackground(id, [{ id: 'a1', role: 'assistant', content: 'hi there' }]);
    const next = await om.turn(id, [{ id: 'u2', role: 'user', content: 'how are you?' }]);
    assert.deepEqual(
      (await reply).appended.map((a) => a.message_id),
      ['a1'],
    );
    assert.deepEqual(
      next.messages.map((m) => (m as unknown as StoredMessage).id),
      ['u1', 'a1', 'u2'],
    );
    const failed = om.appendInBackground(id, [{ id: 'a1', role: 'assistant', content: 'changed' }]);
    await assert.rejects(om.flush(), (e: unknown) => e instanceof OMError && e.code === 'message_conflict');
    await assert.rejects(failed);
  });

  test('context, time travel, status, working memory, events', async () => {
    const id = uniqueId('ctx');
    await om.append(id, [
      { id: 'c1', role: 'user', content: 'first' },
      { id: 'c2', role: 'assistant', content: 'second' },
    ]);
    const now = await om.context(id);
    assert.deepEqual(
      now.messages.map((m) => (m as unknown as StoredMessage).id),
      ['c1', 'c2'],
    );
    const past = await om.context(id, { at_version: 2 });
    assert.ok(past.version <= 2);
    await rejects(om.context(id, { at_version: now.version + 50 }), 422, 'version_out_of_range');
    const openai = await om.context(id, { format: 'openai', wait: false });
    assert.deepEqual(openai.messages, [
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'second' },
    ]);
    const status = await om.status(id);
    assert.equal(status['threadId'], id);
    assert.ok(typeof status['windows'] === 'object');
    const memory = await om.workingMemory(id);
    assert.equal(memory['enabled'], false);
    const page = await om.events(id, { types: ['MessageAppended'], limit: 1 });
    assert.equal(page.events.length, 1);
    assert.equal(page.events[0]?.type, 'MessageAppended');
    const all = [];
    for await (const event of om.allEvents(id, { types: 'MessageAppended' })) all.push(event.data['message_id']);
    assert.deepEqual(all, ['c1', 'c2']);
  });

  test('observe, reflect and the observation log', async () => {
    const id = uniqueId('obs');
    // no background buffering: what observe does is then its own synchronous cycle, whatever the timing
    const profile = `sync-${Math.random().toString(36).slice(2, 8)}`;
    await om.putProfile(profile, { model: 'om-local/extractive', observation: { bufferTokens: false } });
    await om.putThread(id, { profile });
    const facts = Array.from({ length: 6 }, (_, i) => ({
      id: `f${i}`,
      role: i % 2 ? 'assistant' : 'user',
      content: `Fact ${i}: my colleague Ana ${i} works in the Porto office on the billing migration project.`,
    }));
    await om.append(id, facts);
    const observed = await om.observe(id);
    assert.equal(observed.outcome, 'completed');
    assert.ok(observed.parts.some((p) => p.type === 'data-om-observation-end'));
    const log = await om.observations(id);
    assert.ok(log.log.length > 0, 'the log has a segment');
    assert.match(JSON.stringify(log.log), /Porto/);
    const reflected = await om.reflect(id);
    assert.equal(reflected.outcome, 'completed');
    const generations = await om.observations(id);
    assert.ok(generations.generation >= 1);
    const earlier = await om.observations(id, { generation: 0 });
    assert.equal(earlier.generation, 0);
  });

  test('recall: messages, threads and search; the tool schema', async () => {
    const resource = uniqueId('res');
    const id = uniqueId('rec');
    await om.putThread(id, { resource_id: resource });
    await om.append(id, [
      { id: 'r1', role: 'user', content: 'The wifi password at the cabin is larch-7.' },
      { id: 'r2', role: 'assistant', content: 'Noted.' },
    ]);
    const page = await om.recall(id, { cursor: 'r1', page: 1, limit: 5 });
    assert.equal(page.mode, 'messages');
    const browsed = await om.recall(id, { anchor: 'end', limit: 2 });
    assert.deepEqual(
      (browsed['messages'] as { id: string }[]).map((m) => m.id),
      ['r1', 'r2'],
    );
    const threads = await om.recall(id, { mode: 'threads' });
    assert.ok((threads['threads'] as { id: string }[]).some((t) => t.id === id));
    const found = await om.recall(id, { mode: 'search', query: 'wifi password' });
    assert.match(JSON.stringify(found), /larch-7/);
    await rejects(om.recall(id, { mode: 'search' }), 422, 'query_required');
    const tool = await om.recallTool();
    assert.equal((tool['function'] as { name?: string } | undefined)?.name ?? tool['name'], 'recall');
  });

  test('profiles: list, put, get, delete', async () => {
    const name = `ts-${Math.random().toString(36).slice(2, 8)}`;
    const put = await om.putProfile(name, { model: 'om-local/extractive', observation: { messageTokens: 900 } });
    assert.equal(put.source, 'tenant');
    assert.equal(put.scope, 'thread');
    const got = await om.getProfile(name);
    assert.equal(got.changes.length, 1);
    assert.ok((await om.listProfiles()).some((p) => p.name === name));
    const bad = await rejects(om.putProfile(name, { observation: { mesageTokens: 1 } }), 422, 'invalid_config');
    assert.match(JSON.stringify(bad.details), /messageTokens/);
    const id = uniqueId('prof');
    await om.append(id, [{ id: 'p1', role: 'user', content: 'hello' }], { profile: name });
    assert.equal((await om.getThread(id)).profile, name);
    await rejects(om.deleteProfile(name), 409, 'profile_conflict');
    await om.deleteThread(id);
    await om.deleteProfile(name);
    await rejects(om.getProfile(name), 404, 'profile_not_found');
  });

  test('the live stream replays a thread from Last-Event-ID 0 (resume: stream.test.ts)', async () => {
    const id = uniqueId('live');
    await om.append(id, [{ id: 's1', role: 'user', content: 'hello' }]);
    const stream = om.stream(id, { lastEventId: 0 });
    const parts = [];
    for await (const part of stream) {
      parts.push(part);
      if (part.type === 'data-om-status') break;
    }
    assert.equal(parts.at(-1)?.type, 'data-om-status');
    assert.equal(typeof parts.at(-1)?.position, 'number');
    assert.equal(stream.lastEventId, String(parts.at(-1)?.position));
  });

  test('erase: 204, then 404 everywhere', async () => {
    const id = uniqueId('del');
    await om.append(id, [{ id: 'd1', role: 'user', content: 'forget me' }]);
    await om.deleteThread(id);
    await rejects(om.getThread(id), 404, 'thread_not_found');
    await rejects(om.context(id), 404, 'thread_not_found');
  });
});

describe('the OpenAI-compatible proxy', () => {
  test('models, a completion and a streamed one, with om headers', async () => {
    const models = await om.models();
    assert.ok(models.data.some((m) => m.id === 'om-local/chat'));
    const id = uniqueId('proxy');
    const messages = [{ role: 'user', content: 'My sister Priya lives in Lisbon.' }];
    const { completion, om: status } = await om.chatCompletion({ model: 'om-local/chat', messages }, { threadId: id });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(status.threadId, id);
    assert.equal(status.appended, 1);
    const reply = (completion.choices[0] as { message: { content: string } }).message.content;
    const history = [
      ...messages,
      { role: 'assistant', content: reply },
      { role: 'user', content: 'Where does she live?' },
    ];
    const streamed = await om.chatCompletionStream({ model: 'om-local/chat', messages: history }, { threadId: id });
    assert.equal(streamed.om.appended, 1, 'the resent history is stored once');
    let text = '';
    for await (const chunk of streamed.chunks) {
      const delta = (chunk['choices'] as { delta?: { content?: string } }[])[0]?.delta?.content;
      if (delta) text += delta;
    }
    assert.ok(text.length > 0);
    const stored = await until(async () => {
      const page = await om.events(id, { types: 'MessageAppended' });
      return page.events.length === 4 && page;
    }, 'the streamed reply to be stored');
    assert.deepEqual(
      stored.events.map((e) => e.data['role']),
      ['user', 'assistant', 'user', 'assistant'],
    );
    await rejects(om.chatCompletion({ model: 'nobody/nothing', messages }, { threadId: id }), 404, 'model_not_found');
  });
});

describe('the service', () => {
  test('health, readiness, metrics', async () => {
    assert.deepEqual(await om.health(), { status: 'ok' });
    const ready = await om.ready();
    assert.equal(ready.ready, true);
    assert.equal(ready.checks['database'], 'ok');
    assert.match(await om.metrics(), /om_http_requests/);
  });

  test("a wrong key is 401; another tenant's thread is 404", async () => {
    const id = uniqueId('iso');
    await om.append(id, [{ id: 'i1', role: 'user', content: 'mine' }]);
    const stranger = new OMClient({ baseUrl: base, apiKey: 'not-a-key' });
    await rejects(stranger.getThread(id), 401, 'unauthorized');
    const other = new OMClient({ baseUrl: base, apiKey: OTHER_KEY });
    await rejects(other.getThread(id), 404, 'thread_not_found');
    await rejects(other.context(id), 404, 'thread_not_found');
  });

  test('a server that is not ready says which check failed', async () => {
    const notReady = new OMClient({
      baseUrl: base,
      fetch: async () =>
        new Response(
          JSON.stringify({ status: 'not_ready', checks: { database: 'error: OperationalError', broker: 'ok' } }),
          {
            status: 503,
            headers: { 'content-type': 'application/json' },
          },
        ),
    });
    assert.deepEqual(await notReady.ready(), {
      ready: false,
      status: 'not_ready',
      checks: { database: 'error: OperationalError', broker: 'ok' },
    });
  });

  test('429 and 503 are retried after Retry-After when the request is safe to repeat, and only then', async () => {
    const unavailable = () =>
      new Response(JSON.stringify({ error: { code: 'store_unavailable', message: 'retry', details: {} } }), {
        status: 503,
        headers: { 'content-type': 'application/json', 'retry-after': '0' },
      });
    let failFirst = 0;
    const flaky = new OMClient({
      baseUrl: base,
      apiKey: KEY,
      fetch: async (input, init) => (failFirst-- > 0 ? unavailable() : fetch(input, init)),
    });
    const id = uniqueId('retry');
    failFirst = 1;
    const appended = await flaky.append(id, [{ id: 'r1', role: 'user', content: 'with an id: safe to repeat' }]);
    assert.deepEqual(
      appended.appended.map((a) => a.message_id),
      ['r1'],
    );
    failFirst = 1;
    const error = await rejects(
      flaky.append(id, [{ role: 'user', content: 'no id: not repeated' }]),
      503,
      'store_unavailable',
    );
    assert.equal(error.retryAfter, 0);
    failFirst = 3;
    await rejects(flaky.getThread(id), 503, 'store_unavailable');
    assert.equal(failFirst, 0, 'two retries, then the error');
  });

  test('an unreachable server is an OMConnectionError, after the retries', async () => {
    let attempts = 0;
    const down = new OMClient({
      baseUrl: 'http://127.0.0.1:9',
      maxRetries: 2,
      maxRetryDelayMs: 10,
      fetch: async (input, init) => {
        attempts++;
        return fetch(input, init);
      },
    });
    await assert.rejects(down.getThread('x'), (e: unknown) => e instanceof OMConnectionError);
    assert.equal(attempts, 3);
  });
});

test('the calls above cover every route of the OpenAPI document', () => {
  const routes = Object.entries(SCHEMA.paths).flatMap(([template, operations]) =>
    Object.keys(operations).map((method) => {
      const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`);
      return { route: `${method.toUpperCase()} ${template}`, method: method.toUpperCase(), pattern };
    }),
  );
  const uncovered = routes
    .filter(
      ({ method, pattern }) =>
        ![...called].some((call) => {
          const [m, path] = call.split(' ');
          return m === method && pattern.test(path ?? '');
        }),
    )
    .map(({ route }) => route);
  assert.deepEqual(
    uncovered,
    [],
    `routes the client's tests do not exercise (add them to src/client.ts and here): ${uncovered.join(', ')}`,
  );
});
