// om as an AI SDK language-model middleware:
//
//   const model = wrapLanguageModel({ model: openai('gpt-5-mini'), middleware: omMemory({ client, threadId }) });
//
// Before each call (transformParams) it stores the prompt's new messages and reads the thread's context in
// one request (POST …/turn), and sends the model om's memory instead of the app's history: the app's system
// messages, om's system messages (observations), its continuation hint, then the unobserved messages. After
// the call it stores the model's answer (wrapGenerate), or, streaming, once the stream has finished
// (wrapStream). Each message gets an id derived from its place in the conversation (./ids.ts), so the
// history the AI SDK sends again on every call, and any retry, is stored once.
import type { LanguageModelMiddleware } from 'ai';
import type { OMClient } from '../client.js';
import { OMError } from '../errors.js';
import type { MessageInput, StoredMessage } from '../types.js';
import { chainIds, placeOnTail, signature, TRAILING_REPLIES, type Placement } from './ids.js';
import { answerMessage, fromOm, toOm, type PromptMessage, type SpecVersion } from './messages.js';

type TransformOptions = Parameters<NonNullable<LanguageModelMiddleware['transformParams']>>[0];
type CallParams = TransformOptions['params'];
type GenerateResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware['wrapGenerate']>>>;
type StreamResult = Awaited<ReturnType<NonNullable<LanguageModelMiddleware['wrapStream']>>>;
type Loose = Record<string, unknown>;

export interface OmMemoryOptions {
  /** The om client (base URL and the tenant's key). */
  client: OMClient;
  /** The conversation's thread. A call may name another in `providerOptions: { om: { threadId } }`. */
  threadId?: string;
  /** The thread's resource (needed in resource scope; also `providerOptions.om.resourceId`). */
  resourceId?: string;
  /** The named profile a new thread runs under (also `providerOptions.om.profile`). */
  profile?: string;
  /**
   * The caller's model as om names models (`provider/model`), for provider changes, idle TTLs and token
   * counts. By default it is the wrapped model's (`openai.chat` + `gpt-5-mini` → `openai/gpt-5-mini`).
   */
  callerModel?: string;
  /** false: never block the call on a synchronous observation (om's `?wait=false`). Default true. */
  wait?: boolean;
}

interface Turn {
  threadId: string;
  resourceId: string | undefined;
  profile: string | undefined;
  callerModel: string;
  /** The id of the conversation's last message: the answer's id is derived from it. */
  lastId: string;
}

// the transformed params are the object wrapGenerate and wrapStream receive
const turns = new WeakMap<object, Turn>();

const isRecord = (value: unknown): value is Loose =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// AI SDK provider ids whose om (litellm) name is not their first segment
const PROVIDER_NAMES: Record<string, string> = {
  'google.generative-ai': 'gemini',
  'google.vertex': 'vertex_ai',
  'amazon-bedrock': 'bedrock',
};

/** The wrapped model as om names a caller's model: `provider/model`. */
export function callerModelOf(model: { provider: string; modelId: string }): string {
  // a gateway's model id names its provider already (`openai/gpt-5`)
  if (model.modelId.includes('/')) return model.modelId;
  const known = Object.keys(PROVIDER_NAMES).find((id) => model.provider === id || model.provider.startsWith(`${id}.`));
  const provider = known ? PROVIDER_NAMES[known] : model.provider.split('.')[0];
  return `${provider}/${model.modelId}`;
}

function target(options: OmMemoryOptions, params: CallParams): Omit<Turn, 'callerModel' | 'lastId'> {
  const perCall =
    isRecord(params.providerOptions) && isRecord(params.providerOptions['om']) ? params.providerOptions['om'] : {};
  const pick = (key: string, fallback: string | undefined) =>
    typeof perCall[key] === 'string' ? (perCall[key] as string) : fallback;
  const threadId = pick('threadId', options.threadId);
  if (!threadId) {
    throw new TypeError(
      "omMemory needs the conversation's thread: omMemory({ client, threadId }), or providerOptions: { om: { threadId } } on the call",
    );
  }
  return { threadId, resourceId: pick('resourceId', options.resourceId), profile: pick('profile', options.profile) };
}

async function storedTail(client: OMClient, threadId: string, count: number, signal?: AbortSignal) {
  const limit = Math.min(20, count + TRAILING_REPLIES + 1);
  try {
    const page = await client.recall(threadId, { anchor: 'end', limit }, { signal });
    const messages = Array.isArray(page['messages']) ? (page['messages'] as { id: string; role: string }[]) : [];
    return { messages, whole: page['hasPrevPage'] === false };
  } catch (error) {
    if (error instanceof OMError && error.code === 'thread_not_found') return { messages: [], whole: true };
    throw error;
  }
}

interface Window {
  system: string[];
  continuation: string | null;
  messages: StoredMessage[];
}

async function readWindow(
  client: OMClient,
  turn: Turn,
  fresh: MessageInput[],
  wait: boolean,
  signal: AbortSignal | undefined,
): Promise<Window> {
  const query = { model: turn.callerModel, ...(wait ? {} : { wait: false }), signal };
  if (fresh.length) {
    const answer = await client.turn(turn.threadId, fresh, {
      ...query,
      resourceId: turn.resourceId,
      profile: turn.profile,
    });
    return {
      system: answer.system,
      continuation: answer.continuation,
      messages: answer.messages as unknown as StoredMessage[],
    };
  }
  try {
    const answer = await client.context(turn.threadId, query);
    return {
      system: answer.system,
      continuation: answer.continuation,
      messages: answer.messages as unknown as StoredMessage[],
    };
  } catch (error) {
    // nothing to store and no thread yet: there is no memory to add
    if (error instanceof OMError && error.code === 'thread_not_found')
      return { system: [], continuation: null, messages: [] };
    throw error;
  }
}

/** The prompt the model gets: the app's instructions, om's memory, then the conversation as om holds it,
 * with the app's own copy of each message om returns (provider metadata intact) and the app's messages om
 * could not hold kept after the one they followed. */
function assemble(
  instructions: PromptMessage[],
  window: Window,
  conversation: PromptMessage[],
  ids: string[],
  tailStart: number,
  version: SpecVersion,
): PromptMessage[] {
  const own = new Map(ids.map((id, i) => [id, conversation[i] as PromptMessage]));
  // one slot per message of the window: its prompt messages, and the app's messages that go with it
  const slots: PromptMessage[][] = [];
  const slotOf = new Map<string, PromptMessage[]>();
  for (const message of window.messages) {
    const mine = own.get(message.id);
    const slot = mine ? [mine] : fromOm(message, version);
    slots.push(slot);
    if (mine) slotOf.set(message.id, slot);
  }
  const trailing: PromptMessage[] = [];
  slots.push(trailing);
  let current = trailing;
  let pending: PromptMessage[] = [];
  for (let i = tailStart; i < conversation.length; i++) {
    const slot = slotOf.get(ids[i] as string);
    if (slot) {
      slot.unshift(...pending);
      pending = [];
      current = slot;
    } else {
      pending.push(conversation[i] as PromptMessage);
    }
  }
  current.push(...pending);
  const history = slots.flat();
  const memory: PromptMessage[] = window.system.map((text) => ({ role: 'system', content: text }));
  if (window.continuation) memory.push({ role: 'user', content: [{ type: 'text', text: window.continuation }] });
  return [...instructions, ...memory, ...history];
}

async function storeAnswer(client: OMClient, turn: Turn, content: readonly unknown[]): Promise<void> {
  const message = toOm(answerMessage(content));
  if (!message) return;
  const [id] = await chainIds(turn.threadId, turn.lastId, [await signature(message, answerMessage(content))]);
  await client.append(turn.threadId, [{ ...message, id, model: turn.callerModel }], {
    resourceId: turn.resourceId,
    profile: turn.profile,
  });
}

/** Collects a streamed answer into the content a generate result would have carried. */
class AnswerCollector {
  finished = false;
  failed = false;
  private readonly content: Loose[] = [];
  private readonly open = new Map<string, Loose>();

  add(chunk: Loose): void {
    const type = chunk['type'];
    const key = `${String(type).split('-')[0]}:${String(chunk['id'])}`;
    if (type === 'text-start' || type === 'reasoning-start') {
      const part = { type: type === 'text-start' ? 'text' : 'reasoning', text: '' };
      this.open.set(key, part);
      this.content.push(part);
    } else if (type === 'text-delta' || type === 'reasoning-delta') {
      let part = this.open.get(key);
      if (!part) {
        part = { type: type === 'text-delta' ? 'text' : 'reasoning', text: '' };
        this.open.set(key, part);
        this.content.push(part);
      }
      part['text'] = String(part['text']) + String(chunk['delta'] ?? '');
    } else if (type === 'tool-call' || type === 'tool-result' || type === 'file') {
      this.content.push(chunk);
    } else if (type === 'finish') {
      this.finished = true;
    } else if (type === 'error') {
      this.failed = true;
    }
  }

  answer(): readonly unknown[] {
    return this.content;
  }
}

/**
 * The AI SDK middleware that gives a model om's Observational Memory:
 * `wrapLanguageModel({ model, middleware: omMemory({ client, threadId }) })`.
 */
export function omMemory(options: OmMemoryOptions): LanguageModelMiddleware {
  const { client } = options;
  const wait = options.wait ?? true;
  return {
    specificationVersion: 'v3',

    async transformParams({ params, model }: TransformOptions): Promise<CallParams> {
      const where = target(options, params);
      // ai 7 hands a V3 middleware its V4 model and params: file data is written the V4 way then
      const spec: string = model.specificationVersion;
      const version: SpecVersion = spec === 'v4' ? 'v4' : 'v3';
      const prompt = params.prompt as unknown as PromptMessage[];
      const instructions = prompt.filter((m) => m.role === 'system');
      const conversation = prompt.filter((m) => m.role !== 'system');
      const converted = conversation.map(toOm);
      const signatures = await Promise.all(conversation.map((m, i) => signature(converted[i], m)));
      let lastAssistant = -1;
      conversation.forEach((m, i) => {
        if (m.role === 'assistant') lastAssistant = i;
      });
      const placement: Placement =
        lastAssistant >= 0
          ? { ids: await chainIds(where.threadId, '', signatures), anchor: '' }
          : await placeOnTail(
              where.threadId,
              signatures,
              await storedTail(client, where.threadId, signatures.length, params.abortSignal),
            );
      const { ids } = placement;
      const tailStart = lastAssistant + 1;
      const fresh: MessageInput[] = [];
      for (let i = tailStart; i < conversation.length; i++) {
        const message = converted[i];
        if (message) fresh.push({ ...message, id: ids[i] as string });
      }
      const turn: Turn = {
        ...where,
        callerModel: options.callerModel ?? callerModelOf(model),
        lastId: ids.length ? (ids[ids.length - 1] as string) : placement.anchor,
      };
      const window = await readWindow(client, turn, fresh, wait, params.abortSignal);
      const providerOptions = isRecord(params.providerOptions)
        ? Object.fromEntries(Object.entries(params.providerOptions).filter(([key]) => key !== 'om'))
        : params.providerOptions;
      const transformed = {
        ...params,
        providerOptions,
        prompt: assemble(instructions, window, conversation, ids, tailStart, version),
      } as CallParams;
      turns.set(transformed, turn);
      return transformed;
    },

    async wrapGenerate({ doGenerate, params }): Promise<GenerateResult> {
      const result = await doGenerate();
      const turn = turns.get(params);
      if (turn) await storeAnswer(client, turn, result.content as readonly unknown[]);
      return result;
    },

    async wrapStream({ doStream, params }): Promise<StreamResult> {
      const result = await doStream();
      const turn = turns.get(params);
      if (!turn) return result;
      const collector = new AnswerCollector();
      type Chunk = StreamResult['stream'] extends ReadableStream<infer C> ? C : never;
      const stream = result.stream.pipeThrough(
        new TransformStream<Chunk, Chunk>({
          transform(chunk, controller) {
            collector.add(chunk as unknown as Loose);
            controller.enqueue(chunk);
          },
          // a stream cut short, or one that failed, stores no answer
          async flush() {
            if (collector.finished && !collector.failed) await storeAnswer(client, turn, collector.answer());
          },
        }),
      );
      return { ...result, stream };
    },
  };
}
