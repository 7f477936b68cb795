// The client for om's HTTP API (docs/api.md): one method per route, typed by the generated OpenAPI types,
// on nothing but `fetch`, so it runs in Node >= 20, browsers, Deno, Bun and edge runtimes alike.
import { OMConnectionError, OMError, errorOf } from './errors.js';
import { PartGrouper, lines, type StreamPart } from './sse.js';
import type {
  AppendOut,
  AppendQuery,
  ChatCompletionOut,
  ContextFor,
  ContextQuery,
  CycleOut,
  EventOut,
  EventsOut,
  EventsQuery,
  ListQuery,
  MessageInput,
  ModelsOut,
  ObservationsOut,
  ObservationsQuery,
  ProfileOut,
  ProfilesOut,
  RecallOut,
  RecallQuery,
  Thread,
  ThreadIn,
  ThreadsOut,
  TurnFor,
  TurnQuery,
} from './types.js';

type Fetch = typeof globalThis.fetch;
type Query = Record<string, string | number | boolean | null | undefined>;
type Format = 'om' | 'openai';

export interface OMClientOptions {
  /** The server, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The tenant's API key (`om keys create`, or OM_API_KEYS), sent as `Authorization: Bearer …`. */
  apiKey?: string;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** The fetch to use (default: the global one): a proxy-aware one, a test recorder, … */
  fetch?: Fetch;
  /** How long one request may take before it is abandoned (default 60 s; the live stream has none). */
  timeoutMs?: number;
  /**
   * How many times a request that is safe to repeat is retried when om could not be reached or answered
   * 429/503 (default 2). Safe: reads, PUT, DELETE, and appends whose messages all carry ids (om stores a
   * message id once). The wait is the server's Retry-After, at most `maxRetryDelayMs` (default 10 s).
   */
  maxRetries?: number;
  maxRetryDelayMs?: number;
}

export interface CallOptions {
  /** Abandons the request (and its retries). */
  signal?: AbortSignal;
}

export interface MessagesOptions extends CallOptions {
  /** The thread's resource (needed in resource scope the first time a thread is seen). */
  resourceId?: string;
  /** The named profile a new thread runs under; for an existing thread, when given, its own. */
  profile?: string;
}

export type AppendOptions = MessagesOptions & AppendQuery;
export type TurnOptions<F extends Format> = MessagesOptions & Omit<TurnQuery, 'format'> & { format?: F };
export type ContextOptions<F extends Format> = CallOptions & Omit<ContextQuery, 'format'> & { format?: F };

export interface StreamOptions {
  /** Resume after this event (the `position` of a part, or `lastEventId` of an earlier stream); `0`
   * replays the thread from its first event; without it the stream starts live. */
  lastEventId?: number | string;
  /** Reconnect after a dropped connection, resuming from the last complete event (default true). */
  reconnect?: boolean;
  /** Consecutive failed reconnects before the stream gives up (default 100). */
  maxReconnects?: number;
  /** A connection silent for this long is taken as dead and reconnected (default 45 s; om pings every 15 s). */
  idleTimeoutMs?: number;
  signal?: AbortSignal;
}

/** What the OpenAI-compatible proxy needs beside OpenAI's own request (docs/api.md, OpenAI-compatible proxy). */
export interface ChatCompletionOptions extends CallOptions {
  threadId: string;
  resourceId?: string;
  profile?: string;
  /** The provider's key for this call, when the server allows it (OM_CHAT_FORWARD_PROVIDER_KEY). */
  providerKey?: string;
}

/** om's view of the thread after a proxied call, from the X-OM-* response headers. */
export interface ProxyStatus {
  threadId: string | null;
  version: number | null;
  pendingTokens: number | null;
  observationTokens: number | null;
  generation: number | null;
  appended: number | null;
}

export interface Readiness {
  ready: boolean;
  status: string;
  checks: Record<string, string>;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_IDLE_TIMEOUT_MS = 45_000;

const thread = (threadId: string) => `/v1/threads/${encodeURIComponent(threadId)}`;

function queryString(query: Query | undefined): string {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null) continue;
    params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : '';
}

function messagesBody(messages: readonly MessageInput[], options: MessagesOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { messages };
  if (options.resourceId !== undefined) body['resource_id'] = options.resourceId;
  if (options.profile !== undefined) body['profile'] = options.profile;
  return body;
}

/** om stores a message id once, so an append whose messages all carry ids may be sent again. */
function allIdentified(messages: readonly MessageInput[]): boolean {
  return messages.every((m) => typeof (m as { id?: unknown }).id === 'string');
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const timer = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener('abort', stop);
      resolve();
    }
    function stop() {
      clearTimeout(timer);
      reject(abortError(signal as AbortSignal));
    }
    signal?.addEventListener('abort', stop, { once: true });
  });
}

/** A signal that aborts with `signal` or after `ms`, and the function that releases its timer. */
function withTimeout(signal: AbortSignal | undefined, ms: number): [AbortSignal, () => void] {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`no answer within ${ms} ms`, 'TimeoutError')), ms);
  const forward = () => controller.abort(abortError(signal as AbortSignal));
  if (signal?.aborted) forward();
  signal?.addEventListener('abort', forward, { once: true });
  return [
    controller.signal,
    () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', forward);
    },
  ];
}

/** The response with its body already read, so nothing of it is left to a timer that has run out. */
async function settled(response: Response): Promise<Response> {
  const body = await response.arrayBuffer();
  const empty = response.status === 204 || response.status === 205 || response.status === 304;
  return new Response(empty ? null : body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

function numberHeader(response: Response, name: string): number | null {
  const value = response.headers.get(name);
  return value === null || value === '' ? null : Number(value);
}

interface SendOptions extends CallOptions {
  query?: Query;
  body?: unknown;
  headers?: Record<string, string>;
  /** Whether the request may be sent again after a failure (see OMClientOptions.maxRetries). */
  repeatable: boolean;
  /** No per-request timeout (a stream that lasts as long as the caller reads it). */
  untimed?: boolean;
  /** Error statuses that are an answer here, not an error (readiness answers 503 with its checks). */
  answers?: readonly number[];
}

export class OMClient {
  readonly baseUrl: string;
  private readonly fetchImpl: Fetch;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly maxRetryDelayMs: number;
  // appends sent without waiting go one at a time, so the thread's order is the order they were sent
  private queue: Promise<unknown> = Promise.resolve();
  private pending: Promise<AppendOut>[] = [];

  constructor(options: OMClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.headers = { ...(options.headers ?? {}) };
    if (options.apiKey) this.headers['authorization'] = `Bearer ${options.apiKey}`;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxRetries = options.maxRetries ?? 2;
    this.maxRetryDelayMs = options.maxRetryDelayMs ?? 10_000;
  }

  // --- threads --------------------------------------------------------------------------------------

  /** The tenant's threads, most recently updated first. */
  async listThreads(query: ListQuery = {}, options: CallOptions = {}): Promise<Thread[]> {
    const answer = await this.json<ThreadsOut>('GET', '/v1/threads', { ...options, query, repeatable: true });
    return answer.threads;
  }

  /** The threads of one resource. */
  async resourceThreads(resourceId: string, query: ListQuery = {}, options: CallOptions = {}): Promise<Thread[]> {
    const path = `/v1/resources/${encodeURIComponent(resourceId)}/threads`;
    const answer = await this.json<ThreadsOut>('GET', path, { ...options, query, repeatable: true });
    return answer.threads;
  }

  /** Create a thread, or change its resource, title, metadata, memory options or profile. */
  putThread(threadId: string, body: ThreadIn = {}, options: CallOptions = {}): Promise<Thread> {
    return this.json('PUT', thread(threadId), { ...options, body, repeatable: true });
  }

  getThread(threadId: string, options: CallOptions = {}): Promise<Thread> {
    return this.json('GET', thread(threadId), { ...options, repeatable: true });
  }

  /** Erase the thread finally: its events, messages and everything derived from them. */
  async deleteThread(threadId: string, options: CallOptions = {}): Promise<void> {
    await this.send('DELETE', thread(threadId), { ...options, repeatable: true });
  }

  // --- messages and context -------------------------------------------------------------------------

  /** Append messages (OpenAI chat or AI SDK UI messages). A message id is an idempotency key: one sent
   * again with the same content is reported in `duplicates`, not stored twice. */
  append(threadId: string, messages: readonly MessageInput[], options: AppendOptions = {}): Promise<AppendOut> {
    return this.postMessages(`${thread(threadId)}/messages`, messages, options);
  }

  /**
   * Send an append without waiting for its answer: the reply after the model call, off the agent's
   * critical path. Such appends go one at a time, in order; `turn` and `flush` wait for them, so the next
   * turn's message always lands after the reply. The returned promise is the append's answer.
   */
  appendInBackground(
    threadId: string,
    messages: readonly MessageInput[],
    options: AppendOptions = {},
  ): Promise<AppendOut> {
    const sent = this.queue.then(() => this.append(threadId, messages, options));
    this.queue = sent.catch(() => undefined);
    this.pending.push(sent);
    // its failure is reported by flush() (and the next turn), not as an unhandled rejection
    sent.catch(() => undefined);
    return sent;
  }

  /** Wait for every append sent with `appendInBackground`; throws the first one's error. */
  async flush(): Promise<void> {
    const pending = this.pending;
    this.pending = [];
    for (const sent of pending) await sent;
  }

  /** A turn in one request: append the turn's messages, then read the context to send the model. */
  async turn<F extends Format = 'om'>(
    threadId: string,
    messages: readonly MessageInput[],
    options: TurnOptions<F> = {},
  ): Promise<TurnFor<F>> {
    await this.flush();
    return this.postMessages(`${thread(threadId)}/turn`, messages, options);
  }

  /** The projected context window: om's system messages, the continuation hint, the unobserved messages.
   * `at_version` reads it as it was at that version. */
  context<F extends Format = 'om'>(threadId: string, options: ContextOptions<F> = {}): Promise<ContextFor<F>> {
    const { signal, ...query } = options;
    return this.json('GET', `${thread(threadId)}/context`, { signal, query, repeatable: true });
  }

  /** The thread's `data-om-status` data object. */
  status(threadId: string, options: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.json('GET', `${thread(threadId)}/status`, { ...options, repeatable: true });
  }

  /** The working-memory document the Observer keeps (`observation.manageWorkingMemory`). */
  workingMemory(threadId: string, options: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.json('GET', `${thread(threadId)}/working-memory`, { ...options, repeatable: true });
  }

  /** One page of the thread's events (`after` a stream version); `next_after` pages on. */
  events(
    threadId: string,
    query: Omit<EventsQuery, 'types'> & { types?: string | readonly string[] } = {},
    options: CallOptions = {},
  ): Promise<EventsOut> {
    const types = Array.isArray(query.types) ? query.types.join(',') : (query.types as string | undefined);
    return this.json('GET', `${thread(threadId)}/events`, {
      ...options,
      query: { ...query, types },
      repeatable: true,
    });
  }

  /** Every event of the thread, page by page. */
  async *allEvents(
    threadId: string,
    query: { types?: string | readonly string[] } = {},
    options: CallOptions = {},
  ): AsyncGenerator<EventOut> {
    let after: number | null = 0;
    while (after !== null) {
      const page: EventsOut = await this.events(threadId, { ...query, after, limit: 1000 }, options);
      yield* page.events;
      after = page.next_after;
    }
  }

  /** The observation log by segment, buffered work, generations and work in flight; `generation` shows
   * an earlier generation's final log. */
  observations(threadId: string, query: ObservationsQuery = {}, options: CallOptions = {}): Promise<ObservationsOut> {
    return this.json('GET', `${thread(threadId)}/observations`, { ...options, query, repeatable: true });
  }

  /** Observe now (activate buffered chunks, observe the rest); `wait: false` only queues it. */
  observe(threadId: string, body: { wait?: boolean } = {}, options: CallOptions = {}): Promise<CycleOut> {
    return this.json('POST', `${thread(threadId)}/observe`, { ...options, body, repeatable: false });
  }

  /** Reflect the whole log now into a new generation; `wait: false` only queues it. */
  reflect(threadId: string, body: { wait?: boolean } = {}, options: CallOptions = {}): Promise<CycleOut> {
    return this.json('POST', `${thread(threadId)}/reflect`, { ...options, body, repeatable: false });
  }

  /** The recall tool: browse messages (`mode: 'messages'`), list threads, or search (docs/api.md, Recall). */
  recall(threadId: string, query: RecallQuery = {}, options: CallOptions = {}): Promise<RecallOut> {
    return this.json('GET', `${thread(threadId)}/recall`, { ...options, query, repeatable: true });
  }

  /** The recall tool's JSON schema, as a function-calling tool definition. */
  recallTool(options: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.json('GET', '/v1/tools/recall', { ...options, repeatable: true });
  }

  /** The thread's live `data-om-*` parts (server-sent events), resuming after a dropped connection. */
  stream(threadId: string, options: StreamOptions = {}): OMStream {
    const path = `${thread(threadId)}/stream`;
    return new OMStream(
      (lastEventId, signal) =>
        this.send('GET', path, {
          signal,
          headers: {
            accept: 'text/event-stream',
            ...(lastEventId !== undefined ? { 'last-event-id': lastEventId } : {}),
          },
          repeatable: false,
          untimed: true,
        }),
      options,
    );
  }

  // --- profiles -------------------------------------------------------------------------------------

  /** The deployment's profiles and the tenant's own. */
  async listProfiles(options: CallOptions = {}): Promise<ProfileOut[]> {
    const answer = await this.json<ProfilesOut>('GET', '/v1/profiles', { ...options, repeatable: true });
    return answer.profiles;
  }

  getProfile(name: string, options: CallOptions = {}): Promise<ProfileOut> {
    return this.json('GET', `/v1/profiles/${encodeURIComponent(name)}`, { ...options, repeatable: true });
  }

  /** Set a tenant profile (memory options, validated like a profile file). */
  putProfile(name: string, memoryOptions: Record<string, unknown>, options: CallOptions = {}): Promise<ProfileOut> {
    return this.json('PUT', `/v1/profiles/${encodeURIComponent(name)}`, {
      ...options,
      body: memoryOptions,
      repeatable: true,
    });
  }

  async deleteProfile(name: string, options: CallOptions = {}): Promise<void> {
    await this.send('DELETE', `/v1/profiles/${encodeURIComponent(name)}`, { ...options, repeatable: true });
  }

  // --- the OpenAI-compatible proxy ------------------------------------------------------------------

  /** One chat completion through om's proxy: om stores the new messages, builds the prompt with the
   * thread's memory, calls the model and stores its reply. Never retried (it calls a model). */
  async chatCompletion(
    request: Record<string, unknown> & { model: string; messages: readonly Record<string, unknown>[] },
    options: ChatCompletionOptions,
  ): Promise<{ completion: ChatCompletionOut; om: ProxyStatus }> {
    const response = await this.send('POST', '/v1/chat/completions', {
      signal: options.signal,
      headers: proxyHeaders(options),
      body: { ...request, stream: false },
      repeatable: false,
    });
    return { completion: (await response.json()) as ChatCompletionOut, om: proxyStatus(response) };
  }

  /** A streamed chat completion through om's proxy: `chat.completion.chunk` objects until the model is
   * done (the reply is stored then); a failure after the stream began is thrown as an OMError. */
  async chatCompletionStream(
    request: Record<string, unknown> & { model: string; messages: readonly Record<string, unknown>[] },
    options: ChatCompletionOptions,
  ): Promise<{ chunks: AsyncGenerator<Record<string, unknown>>; om: ProxyStatus }> {
    const response = await this.send('POST', '/v1/chat/completions', {
      signal: options.signal,
      headers: { ...proxyHeaders(options), accept: 'text/event-stream' },
      body: { ...request, stream: true },
      repeatable: false,
      untimed: true,
    });
    return { chunks: completionChunks(response), om: proxyStatus(response) };
  }

  /** The models the proxy offers, as OpenAI lists models. */
  models(options: CallOptions = {}): Promise<ModelsOut> {
    return this.json('GET', '/v1/models', { ...options, repeatable: true });
  }

  // --- the service ----------------------------------------------------------------------------------

  /** Liveness. */
  health(options: CallOptions = {}): Promise<{ status: string }> {
    return this.json('GET', '/healthz', { ...options, repeatable: true });
  }

  /** Readiness (database, broker): `ready` is false when om answered 503, and `checks` says why. */
  async ready(options: CallOptions = {}): Promise<Readiness> {
    const response = await this.send('GET', '/readyz', { ...options, repeatable: false, answers: [503] });
    const body = (await response.json()) as { status: string; checks: Record<string, string> };
    return { ready: response.ok, status: body.status, checks: body.checks };
  }

  /** Prometheus metrics, as text. */
  async metrics(options: CallOptions = {}): Promise<string> {
    const response = await this.send('GET', '/metrics', { ...options, repeatable: true });
    return response.text();
  }

  // --- transport ------------------------------------------------------------------------------------

  /** An append's body (the messages, their resource and profile) with the rest of `options` as the query. */
  private postMessages<T>(
    path: string,
    messages: readonly MessageInput[],
    options: AppendOptions | TurnOptions<Format>,
  ): Promise<T> {
    const { resourceId, profile, signal, ...query } = options;
    return this.json('POST', path, {
      signal,
      query,
      body: messagesBody(messages, { resourceId, profile }),
      repeatable: allIdentified(messages),
    });
  }

  private async json<T>(method: string, path: string, options: SendOptions): Promise<T> {
    const response = await this.send(method, path, options);
    return (await response.json()) as T;
  }

  private async send(method: string, path: string, options: SendOptions): Promise<Response> {
    const url = this.baseUrl + path + queryString(options.query);
    const headers: Record<string, string> = { ...this.headers, ...(options.headers ?? {}) };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.body);
    }
    for (let attempt = 0; ; attempt++) {
      const retries = options.repeatable ? this.maxRetries : 0;
      const [signal, release] = options.untimed
        ? [options.signal, () => undefined]
        : withTimeout(options.signal, this.timeoutMs);
      let response: Response;
      try {
        response = await this.fetchImpl(url, { method, headers, body, signal });
        // the timeout covers the body too: it is read while the timer runs
        if (!options.untimed) response = await settled(response);
      } catch (error) {
        if (options.signal?.aborted) throw error;
        if (attempt >= retries) {
          const why = error instanceof Error ? error.message : String(error);
          throw new OMConnectionError(`${method} ${url} failed: ${why}`, { cause: error });
        }
        await sleep(this.backoff(attempt), options.signal);
        continue;
      } finally {
        release();
      }
      if (response.ok || options.answers?.includes(response.status)) return response;
      const error = await errorOf(response);
      if ((error.status === 429 || error.status === 503) && attempt < retries) {
        const wait = error.retryAfter !== undefined ? error.retryAfter * 1000 : this.backoff(attempt);
        await sleep(Math.min(wait, this.maxRetryDelayMs), options.signal);
        continue;
      }
      throw error;
    }
  }

  private backoff(attempt: number): number {
    return Math.min(250 * 2 ** attempt, this.maxRetryDelayMs);
  }
}

function proxyHeaders(options: ChatCompletionOptions): Record<string, string> {
  const headers: Record<string, string> = { 'x-om-thread-id': options.threadId };
  if (options.resourceId !== undefined) headers['x-om-resource-id'] = options.resourceId;
  if (options.profile !== undefined) headers['x-om-profile'] = options.profile;
  if (options.providerKey !== undefined) headers['x-om-provider-key'] = options.providerKey;
  return headers;
}

function proxyStatus(response: Response): ProxyStatus {
  return {
    threadId: response.headers.get('x-om-thread-id'),
    version: numberHeader(response, 'x-om-version'),
    pendingTokens: numberHeader(response, 'x-om-pending-tokens'),
    observationTokens: numberHeader(response, 'x-om-observation-tokens'),
    generation: numberHeader(response, 'x-om-generation'),
    appended: numberHeader(response, 'x-om-appended'),
  };
}

async function* completionChunks(response: Response): AsyncGenerator<Record<string, unknown>> {
  if (!response.body) return;
  for await (const line of lines(response.body)) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '[DONE]') return;
    const chunk = JSON.parse(data) as Record<string, unknown>;
    if (typeof chunk['error'] === 'object' && chunk['error'] !== null) {
      const error = chunk['error'] as Record<string, unknown>;
      throw new OMError(response.status, {
        code: String(error['code'] ?? error['type'] ?? 'stream_error'),
        message: String(error['message'] ?? 'the model failed during the stream'),
        details: { type: error['type'], param: error['param'] ?? null },
      });
    }
    yield chunk;
  }
}

/**
 * The live parts of a thread, as an async iterable: `for await (const part of om.stream(id)) …`. After a
 * dropped connection it reconnects with the last complete event's id, so each part is seen once.
 * `lastEventId` is where it stands (store it to resume later); `close()` ends it.
 */
export class OMStream implements AsyncIterable<StreamPart> {
  private resumeFrom: string | undefined;
  private retryMs: number | undefined;
  private readonly closed = new AbortController();
  private readonly reconnect: boolean;
  private readonly maxReconnects: number;
  private readonly idleTimeoutMs: number;

  constructor(
    private readonly open: (lastEventId: string | undefined, signal: AbortSignal) => Promise<Response>,
    options: StreamOptions,
  ) {
    this.resumeFrom = options.lastEventId === undefined ? undefined : String(options.lastEventId);
    this.reconnect = options.reconnect ?? true;
    this.maxReconnects = options.maxReconnects ?? 100;
    this.idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    const signal = options.signal;
    if (signal?.aborted) this.closed.abort();
    signal?.addEventListener('abort', () => this.closed.abort(), { once: true });
  }

  /** The id of the last event whose parts have all been handed out: what a reconnect sends as
   * Last-Event-ID, and what to store to resume later (a consumer that stopped in the middle of an
   * event's parts gets that event again). */
  get lastEventId(): string | undefined {
    return this.resumeFrom;
  }

  close(): void {
    this.closed.abort();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<StreamPart> {
    let failures = 0;
    while (!this.closed.signal.aborted) {
      const connection = new AbortController();
      const stop = () => connection.abort();
      this.closed.signal.addEventListener('abort', stop, { once: true });
      let idle: ReturnType<typeof setTimeout> | undefined;
      const watch = () => {
        clearTimeout(idle);
        idle = setTimeout(
          () => connection.abort(new Error(`no data for ${this.idleTimeoutMs} ms`)),
          this.idleTimeoutMs,
        );
      };
      let wait: number | undefined;
      const grouper = new PartGrouper(this.resumeFrom);
      try {
        watch();
        const response = await this.open(this.resumeFrom, connection.signal);
        if (!response.body) throw new Error('the stream answer has no body');
        for await (const line of lines(response.body)) {
          const parts = grouper.feed(line);
          // the watchdog times the server, not a consumer busy with a part (nor one that stopped reading)
          if (parts.length) clearTimeout(idle);
          for (const [index, part] of parts.entries()) {
            failures = 0;
            // the event is delivered with its last part: a consumer holding that part may resume after it
            if (index === parts.length - 1) this.resumeFrom = grouper.last;
            yield part;
          }
          this.resumeFrom = grouper.last;
          this.retryMs = grouper.retryMs ?? this.retryMs;
          watch();
        }
        // the server ended the stream (the thread was erased): a reconnect resumes as its last id says
        if (!this.reconnect) return;
      } catch (error) {
        if (this.closed.signal.aborted) return;
        const transient = error instanceof OMError ? error.status === 429 || error.status === 503 : true;
        if (!this.reconnect || !transient || failures >= this.maxReconnects) {
          if (error instanceof OMError) throw error;
          const why = error instanceof Error ? error.message : String(error);
          throw new OMConnectionError(`the live stream failed: ${why}`, { cause: error });
        }
        failures++;
        if (error instanceof OMError && error.retryAfter !== undefined) wait = error.retryAfter * 1000;
      } finally {
        clearTimeout(idle);
        this.closed.signal.removeEventListener('abort', stop);
        connection.abort();
      }
      wait ??= failures === 0 ? (this.retryMs ?? 1000) : Math.min(100 * 2 ** (failures - 1), 5000);
      try {
        await sleep(wait, this.closed.signal);
      } catch {
        return;
      }
    }
  }
}
