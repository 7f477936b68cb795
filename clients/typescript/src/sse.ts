// Reading om's live stream (GET /v1/threads/{id}/stream): text/event-stream lines into complete events'
// data-om-* parts.
//
// om sends every part of one domain event as its own SSE message and puts `id: <global position>` on the
// last one only, so a Last-Event-ID always names a completely delivered event. The grouper therefore holds
// parts until the message carrying an id arrives: a connection dropped in the middle of an event loses none
// of its parts and, resumed from the last id, repeats none.
import type { Part } from './types.js';

/** A live part, and the SSE id (the event's global position) on the part that completed its event. */
export interface StreamPart extends Part {
  position: number | undefined;
}

interface Message {
  data: string | undefined;
  // this message's own `id:` field, when it had one
  id: string | undefined;
}

/** Incremental text/event-stream parser (the WHATWG rules om relies on: data, id, retry, comments). */
export class SSEParser {
  retryMs: number | undefined;
  private data: string[] = [];
  private id: string | undefined;
  private sawField = false;

  /** Feed one line (without its line ending); returns the message a blank line completes. */
  feed(line: string): Message | undefined {
    if (line === '') {
      if (!this.sawField) return undefined;
      const message = { data: this.data.length ? this.data.join('\n') : undefined, id: this.id };
      this.data = [];
      this.id = undefined;
      this.sawField = false;
      return message;
    }
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') {
      this.data.push(value);
      this.sawField = true;
    } else if (field === 'id' && !value.includes('\0')) {
      this.id = value;
      this.sawField = true;
    } else if (field === 'retry' && /^\d+$/.test(value)) {
      this.retryMs = Number(value);
    }
    return undefined;
  }
}

/** Groups one connection's SSE messages into complete events' parts, and tracks the resume point
 * (Last-Event-ID): the id of the last complete event. */
export class PartGrouper {
  last: string | undefined;
  private parser = new SSEParser();
  private pending: string[] = [];

  constructor(last: string | undefined) {
    this.last = last;
  }

  get retryMs(): number | undefined {
    return this.parser.retryMs;
  }

  feed(line: string): StreamPart[] {
    const message = this.parser.feed(line);
    if (message === undefined) return [];
    if (message.data === undefined) {
      // an event with no part (`id: N` and a comment) still moves the resume point
      if (message.id !== undefined && this.pending.length === 0) this.last = message.id;
      return [];
    }
    if (message.id === undefined) {
      this.pending.push(message.data);
      return [];
    }
    const group = [...this.pending, message.data];
    this.pending = [];
    this.last = message.id;
    const position = /^\d+$/.test(message.id) ? Number(message.id) : undefined;
    return group.map((data, index) => {
      const raw = JSON.parse(data) as Partial<Part>;
      return {
        type: String(raw.type),
        id: String(raw.id ?? ''),
        data: raw.data ?? {},
        position: index === group.length - 1 ? position : undefined,
      };
    });
  }
}

/** The lines of a byte stream, for any of the line endings SSE allows (\n, \r\n, \r). */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let carriageReturn = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      if (carriageReturn && buffer.startsWith('\n')) buffer = buffer.slice(1);
      carriageReturn = false;
      let start = 0;
      for (let i = 0; i < buffer.length; i++) {
        const char = buffer[i];
        if (char !== '\n' && char !== '\r') continue;
        yield buffer.slice(start, i);
        if (char === '\r') {
          if (i + 1 === buffer.length) carriageReturn = true;
          else if (buffer[i + 1] === '\n') i++;
        }
        start = i + 1;
      }
      buffer = buffer.slice(start);
    }
  } finally {
    // also when the consumer stops early: the connection is closed, not left open
    await reader.cancel().catch(() => undefined);
  }
}
