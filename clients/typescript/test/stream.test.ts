// The live stream over a real `om serve`: live parts, resuming from Last-Event-ID, connections cut in the
// middle of an event (nothing lost, nothing repeated), erasure while following.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { OMClient, OMError, type OMStream, type StreamPart } from '../src/index.js';
import { KEY, omServer, uniqueId, until } from './om-server.js';

let base: string;
let om: OMClient;

before(async () => {
  base = await omServer(after);
  om = new OMClient({ baseUrl: base, apiKey: KEY });
});

const key = (p: StreamPart) => `${p.type}|${p.id}|${p.position ?? ''}|${JSON.stringify(p.data)}`;

/** A conversation whose events carry several parts each (buffering, activations, observations). */
async function conversation(threadId: string, turns: number): Promise<number> {
  for (let i = 0; i < turns; i++) {
    await om.turn(threadId, [
      {
        id: `u${i}`,
        role: 'user',
        content: `Turn ${i}: my friend Sam${i} moved to Valencia and adopted a cat named Miso${i}.`,
      },
    ]);
    await om.append(threadId, [{ id: `a${i}`, role: 'assistant', content: `Noted, turn ${i}: Sam${i} and Miso${i}.` }]);
  }
  // let background work finish, so the history is final before it is compared
  await until(async () => {
    const status = await om.status(threadId);
    return !JSON.stringify(status).includes('"running"') && status;
  }, 'background work to finish');
  let last = 0;
  for await (const event of om.allEvents(threadId)) last = event.position;
  return last;
}

/** The parts a stream hands out until it stands at `untilPosition` (an event may have no part, so the
 * stream's resume point is watched rather than the parts). */
async function collect(stream: OMStream, untilPosition: number): Promise<StreamPart[]> {
  const parts: StreamPart[] = [];
  const iterator = stream[Symbol.asyncIterator]();
  let next = iterator.next();
  const deadline = Date.now() + 60_000;
  while (Number(stream.lastEventId ?? 0) < untilPosition) {
    assert.ok(Date.now() < deadline, `the stream did not reach ${untilPosition} (at ${stream.lastEventId})`);
    const step = await Promise.race([next, new Promise<'tick'>((r) => setTimeout(r, 50, 'tick'))]);
    if (step === 'tick') continue;
    assert.ok(!step.done, 'the stream ended early');
    parts.push(step.value);
    next = iterator.next();
  }
  stream.close();
  await next;
  // background work may have added events after `untilPosition`, read in the same chunk: they are not part
  // of the history being compared
  const end = parts.findLastIndex((p) => p.position !== undefined && p.position <= untilPosition);
  return parts.slice(0, end + 1);
}

test('a replay from 0, resumed from a stored Last-Event-ID, gives every part exactly once', async () => {
  const id = uniqueId('resume');
  const last = await conversation(id, 14);
  const full = await collect(om.stream(id, { lastEventId: 0 }), last);
  assert.ok(full.length > 30, `a long history of parts (${full.length})`);
  assert.ok(full.some((p) => p.type === 'data-om-activation' || p.type === 'data-om-observation-end'));
  assert.ok(
    full.some((p) => p.position === undefined),
    'some events carry several parts',
  );

  // stop part-way, in the middle of an event's parts where there is one, and resume from where it stood
  const first = om.stream(id, { lastEventId: 0 });
  const head: StreamPart[] = [];
  const stopAt = full.findIndex((p, i) => i > full.length / 2 && p.position === undefined);
  for await (const part of first) {
    head.push(part);
    if (head.length === stopAt + 1) break;
  }
  const resumedFrom = first.lastEventId;
  assert.ok(resumedFrom !== undefined);
  const delivered = head.findLastIndex((p) => p.position !== undefined && String(p.position) === resumedFrom);
  const rest = await collect(om.stream(id, { lastEventId: resumedFrom }), last);
  assert.deepEqual([...head.slice(0, delivered + 1), ...rest].map(key), full.map(key));
});

test('connections cut at any byte reconnect by themselves and lose or repeat nothing', async () => {
  const id = uniqueId('cut');
  const last = await conversation(id, 10);
  const full = await collect(om.stream(id, { lastEventId: 0 }), last);
  let connections = 0;
  const resumes: (string | null)[] = [];
  // each connection breaks after a few hundred bytes more than the one before, wherever that falls
  const cutting: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    connections++;
    resumes.push(new Headers(init?.headers).get('last-event-id'));
    let budget = 173 * connections;
    const reader = response.body!.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) return controller.close();
        if (value.length >= budget) {
          controller.enqueue(value.subarray(0, budget));
          await reader.cancel();
          controller.error(new TypeError('connection reset'));
          return;
        }
        budget -= value.length;
        controller.enqueue(value);
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const flaky = new OMClient({ baseUrl: base, apiKey: KEY, fetch: cutting });
  const parts = await collect(flaky.stream(id, { lastEventId: 0 }), last);
  assert.ok(connections > 3, `the stream was cut and resumed (${connections} connections)`);
  assert.ok(
    resumes.slice(1).every((r) => r !== null && r !== '0'),
    'each reconnect resumed from an event',
  );
  assert.deepEqual(parts.map(key), full.map(key));
});

test('live parts arrive as the thread changes', async () => {
  const id = uniqueId('live');
  await om.append(id, [{ id: 'l0', role: 'user', content: 'hello' }]);
  const stream = om.stream(id);
  const seen: StreamPart[] = [];
  const reading = (async () => {
    for await (const part of stream) {
      seen.push(part);
      if (part.type === 'data-om-status' && seen.length >= 1) return;
    }
  })();
  // the stream starts live: the message sent before it is not replayed, the next one is seen
  await until(
    async () => {
      await om.append(id, [{ id: `l${Date.now()}`, role: 'user', content: 'are you there?' }]);
      return seen.length > 0;
    },
    'a live part',
    30_000,
  );
  await reading;
  assert.equal(seen.at(-1)?.type, 'data-om-status');
});

test('an erased thread ends the stream, and resuming it is 404', async () => {
  const id = uniqueId('erase');
  await om.append(id, [{ id: 'e0', role: 'user', content: 'soon gone' }]);
  const stream = om.stream(id, { lastEventId: 0 });
  const failure = (async () => {
    for await (const part of stream) {
      if (part.type === 'data-om-status') await om.deleteThread(id);
    }
  })();
  await assert.rejects(failure, (e: unknown) => e instanceof OMError && e.code === 'thread_not_found');
});

test('a malformed Last-Event-ID is refused', async () => {
  const id = uniqueId('bad');
  await om.append(id, [{ id: 'b0', role: 'user', content: 'hello' }]);
  const stream = om.stream(id, { lastEventId: 'not-a-number' });
  await assert.rejects(
    (async () => {
      for await (const part of stream) void part;
    })(),
    (e: unknown) => e instanceof OMError && e.status === 400 && e.code === 'invalid_last_event_id',
  );
});
