// The SSE reader on its own: line endings and chunk boundaries anywhere, and how parts are grouped.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PartGrouper, lines } from '../src/sse.js';

function body(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function all(chunks: string[]): Promise<string[]> {
  const out: string[] = [];
  for await (const line of lines(body(chunks))) out.push(line);
  return out;
}

test('lines end at \\n, \\r\\n or \\r, wherever the chunks are cut', async () => {
  const text = 'id: 1\r\ndata: a\r\n\r\n: ping\rdata: é\n\n';
  const expected = ['id: 1', 'data: a', '', ': ping', 'data: é', ''];
  assert.deepEqual(await all([text]), expected);
  for (let cut = 1; cut < text.length; cut++) {
    assert.deepEqual(await all([text.slice(0, cut), text.slice(cut)]), expected, `cut at ${cut}`);
  }
});

test("an event's parts are held until the message with its id, and an event without parts moves the id", () => {
  const grouper = new PartGrouper(undefined);
  const feed = (text: string) => text.split('\n').flatMap((line) => grouper.feed(line));
  assert.deepEqual(feed('retry: 1000\n\n'), []);
  assert.equal(grouper.retryMs, 1000);
  const part = (type: string) => JSON.stringify({ type, id: 'c1', data: { n: 1 } });
  assert.deepEqual(feed(`data: ${part('data-om-buffering-start')}\n\n`), []);
  assert.deepEqual(
    feed(`id: 42\ndata: ${part('data-om-status')}\n\n`).map((p) => [p.type, p.position]),
    [
      ['data-om-buffering-start', undefined],
      ['data-om-status', 42],
    ],
  );
  assert.equal(grouper.last, '42');
  assert.deepEqual(feed('id: 43\n: MessageAppended\n\n'), []);
  assert.equal(grouper.last, '43');
});
