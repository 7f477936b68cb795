// AI SDK language-model prompt messages <-> om's message shapes.
//
// The prompt is the one a LanguageModelV3 (ai 6) or V4 (ai 7) middleware sees; the two differ only in how
// file data is written (V4 tags it: {type: 'data' | 'url' | ...}), so both are read here, and a prompt is
// written back in the caller's version. om takes AI SDK UI part shapes (text, reasoning, image, file,
// tool-invocation) and returns them in its stored form. Provider metadata is not stored: it is the
// provider's, not the conversation's, and the app's own copy of a message is sent whenever om holds it.
import { base64, utf8Base64 } from '../hash.js';
import type { StoredMessage, StoredPart } from '../types.js';

export type SpecVersion = 'v3' | 'v4';
type Loose = Record<string, unknown>;

/** A prompt message as either spec version has it (only the fields read here). */
export interface PromptMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: unknown;
  providerOptions?: unknown;
}

/** An om message in the shape an append takes (without its id). */
export interface OmMessage {
  role: 'user' | 'assistant' | 'tool';
  parts: Loose[];
}

const isRecord = (value: unknown): value is Loose =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const str = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

// --- into om ------------------------------------------------------------------------------------------

/** A URL om can store for file data: an http(s) or data URL; bytes and base64 become a data URL. */
function fileUrl(data: unknown, mediaType: string): string | undefined {
  if (data instanceof Uint8Array) return `data:${mediaType};base64,${base64(data)}`;
  if (data instanceof URL) return data.href;
  if (typeof data === 'string') {
    return /^(https?:|data:)/i.test(data) ? data : `data:${mediaType};base64,${data}`;
  }
  if (isRecord(data)) {
    // V4's tagged file data
    if (data['type'] === 'data') return fileUrl(data['data'], mediaType);
    if (data['type'] === 'url') return fileUrl(data['url'], mediaType);
    if (data['type'] === 'text' && typeof data['text'] === 'string') {
      return `data:${mediaType};base64,${utf8Base64(data['text'])}`;
    }
  }
  // a provider's file reference has no content om could keep
  return undefined;
}

function filePart(part: Loose): Loose | undefined {
  const mediaType = str(part['mediaType']) ?? 'application/octet-stream';
  const url = fileUrl(part['data'], mediaType);
  if (url === undefined) return undefined;
  const filename = str(part['filename']);
  if (mediaType === 'image' || mediaType.startsWith('image/')) {
    const exact = mediaType.includes('*') || mediaType === 'image' ? undefined : mediaType;
    return { type: 'image', url, ...(exact ? { mimeType: exact } : {}), ...(filename ? { filename } : {}) };
  }
  return { type: 'file', url, mimeType: mediaType, ...(filename ? { filename } : {}) };
}

/** What a tool's output says, as om's tool-invocation fields. */
function outcome(output: unknown): Loose {
  if (!isRecord(output)) return { state: 'result', ...(output === undefined ? {} : { result: output }) };
  switch (output['type']) {
    case 'text':
    case 'json':
    case 'content':
      return { state: 'result', result: output['value'] ?? null };
    case 'error-text':
      return { state: 'error', error: String(output['value'] ?? '') };
    case 'error-json':
      return { state: 'error', error: JSON.stringify(output['value'] ?? null) };
    case 'execution-denied':
      return { state: 'output-denied', ...(typeof output['reason'] === 'string' ? { error: output['reason'] } : {}) };
    default:
      return { state: 'result', result: output };
  }
}

function toolResult(part: Loose): Loose {
  return {
    type: 'tool-invocation',
    toolCallId: String(part['toolCallId']),
    toolName: String(part['toolName'] ?? ''),
    ...outcome(part['output']),
  };
}

function parts(role: PromptMessage['role'], content: unknown): Loose[] {
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  if (!Array.isArray(content)) return [];
  const out: Loose[] = [];
  const calls = new Map<string, Loose>();
  for (const part of content) {
    if (!isRecord(part)) continue;
    const type = part['type'];
    if (type === 'text' && typeof part['text'] === 'string' && part['text']) {
      out.push({ type: 'text', text: part['text'] });
    } else if (type === 'reasoning' && role === 'assistant' && typeof part['text'] === 'string' && part['text']) {
      out.push({ type: 'reasoning', text: part['text'] });
    } else if (type === 'file' && role !== 'tool') {
      const file = filePart(part);
      if (file) out.push(file);
    } else if (type === 'tool-call' && role === 'assistant') {
      const call: Loose = {
        type: 'tool-invocation',
        toolCallId: String(part['toolCallId']),
        toolName: String(part['toolName']),
        state: 'call',
        ...(part['input'] === undefined ? {} : { args: part['input'] }),
      };
      calls.set(String(part['toolCallId']), call);
      out.push(call);
    } else if (type === 'tool-result' && (role === 'tool' || role === 'assistant')) {
      // in an assistant message: a provider-executed tool's result, which completes its call
      const call = calls.get(String(part['toolCallId']));
      if (call) Object.assign(call, outcome(part['output']));
      else out.push(toolResult(part));
    }
    // anything else (approval requests and responses, provider-specific parts) has no om shape
  }
  return out;
}

/** The om message for a conversation message of the prompt; undefined when om could hold none of it. */
export function toOm(message: PromptMessage): OmMessage | undefined {
  if (message.role === 'system') return undefined;
  const content = parts(message.role, message.content);
  if (content.length === 0) return undefined;
  // om refuses a message that says nothing but whitespace
  if (content.every((p) => p['type'] === 'text' && !String(p['text']).trim())) return undefined;
  return { role: message.role, parts: content };
}

/** A model's answer (the content of a generate result, or what a stream carried) as an assistant
 * prompt message, written as the AI SDK writes a response message into the next call's prompt. */
export function answerMessage(content: readonly unknown[]): PromptMessage {
  const out: Loose[] = [];
  for (const part of content) {
    if (!isRecord(part)) continue;
    switch (part['type']) {
      case 'text':
      case 'reasoning':
        out.push({ type: part['type'], text: part['text'] });
        break;
      case 'file':
        out.push({ type: 'file', mediaType: part['mediaType'], data: part['data'] });
        break;
      case 'tool-call': {
        let input: unknown = part['input'];
        if (typeof input === 'string') {
          try {
            input = JSON.parse(input);
          } catch {
            // a model may emit broken JSON; the text is still what it said
          }
        }
        out.push({ type: 'tool-call', toolCallId: part['toolCallId'], toolName: part['toolName'], input });
        break;
      }
      case 'tool-result': {
        const result = part['result'];
        const output = part['isError']
          ? { type: typeof result === 'string' ? 'error-text' : 'error-json', value: result }
          : { type: typeof result === 'string' ? 'text' : 'json', value: result };
        out.push({ type: 'tool-result', toolCallId: part['toolCallId'], toolName: part['toolName'], output });
        break;
      }
    }
  }
  return { role: 'assistant', content: out };
}

// --- out of om ----------------------------------------------------------------------------------------

function dataOf(url: string, version: SpecVersion): unknown {
  const match = /^data:[^,]*?(;base64)?,(.*)$/s.exec(url);
  if (match) {
    const payload = match[1] ? (match[2] ?? '') : utf8Base64(decodeURIComponent(match[2] ?? ''));
    return version === 'v4' ? { type: 'data', data: payload } : payload;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  // an opaque reference om keeps (openai-file:…) is not a file a model can be sent
  if (!/^https?:$/.test(parsed.protocol)) return undefined;
  return version === 'v4' ? { type: 'url', url: parsed } : parsed;
}

function promptFile(part: StoredPart & { url: string }, version: SpecVersion): Loose | undefined {
  const data = dataOf(part.url, version);
  if (data === undefined) return undefined;
  const mediaType =
    (part as { mimeType?: string }).mimeType ?? (part.type === 'image' ? 'image/*' : 'application/octet-stream');
  const filename = (part as { filename?: string }).filename;
  return { type: 'file', mediaType, data, ...(filename ? { filename } : {}) };
}

function toolOutput(part: Extract<StoredPart, { type: 'tool-invocation' }>): Loose {
  if (part.state === 'output-denied') {
    return { type: 'execution-denied', ...(part.error ? { reason: part.error } : {}) };
  }
  if (part.state === 'error' || part.error !== undefined) return { type: 'error-text', value: part.error ?? 'error' };
  if (typeof part.result === 'string') return { type: 'text', value: part.result };
  return { type: 'json', value: part.result ?? null };
}

const answered = (part: Extract<StoredPart, { type: 'tool-invocation' }>) =>
  part.state === 'result' ||
  part.state === 'error' ||
  part.state === 'output-denied' ||
  part.result !== undefined ||
  part.error !== undefined;

/** The prompt messages for a message of om's context window (a tool call's answer as its tool message). */
export function fromOm(message: StoredMessage, version: SpecVersion): PromptMessage[] {
  const stored = Array.isArray(message.parts) ? message.parts : [];
  if (message.role === 'system') {
    const text = stored.map((p) => ('text' in p && typeof p.text === 'string' ? p.text : '')).join('');
    return text ? [{ role: 'system', content: text }] : [];
  }
  const results = (calls: Extract<StoredPart, { type: 'tool-invocation' }>[]): Loose[] =>
    calls.map((p) => ({ type: 'tool-result', toolCallId: p.toolCallId, toolName: p.toolName, output: toolOutput(p) }));
  const invocations = stored.filter(
    (p): p is Extract<StoredPart, { type: 'tool-invocation' }> => p.type === 'tool-invocation',
  );
  if (message.role === 'tool') {
    const content = results(invocations.filter(answered));
    return content.length ? [{ role: 'tool', content }] : [];
  }
  const content: Loose[] = [];
  for (const part of stored) {
    if (part.type === 'text') content.push({ type: 'text', text: part.text });
    else if (part.type === 'reasoning' && message.role === 'assistant')
      content.push({ type: 'reasoning', text: part.text });
    else if (part.type === 'image' || part.type === 'file') {
      const file = promptFile(part, version);
      if (file) content.push(file);
    } else if (part.type === 'tool-invocation' && message.role === 'assistant') {
      content.push({ type: 'tool-call', toolCallId: part.toolCallId, toolName: part.toolName, input: part.args ?? {} });
    }
  }
  if (content.length === 0) return [];
  const out: PromptMessage[] = [{ role: message.role, content }];
  const done = message.role === 'assistant' ? invocations.filter(answered) : [];
  if (done.length) out.push({ role: 'tool', content: results(done) });
  return out;
}
