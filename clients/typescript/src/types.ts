// Names for the generated OpenAPI types the client takes and returns (src/generated/openapi.ts is
// regenerated from om's schema by `npm run generate`; nothing here restates a field the schema has).
import type { components, paths } from './generated/openapi.js';

export type { components, paths } from './generated/openapi.js';

type Schemas = components['schemas'];

export type Thread = Schemas['Thread'];
export type ThreadIn = Schemas['ThreadIn'];
export type ThreadsOut = Schemas['ThreadsOut'];
export type MessagesIn = Schemas['MessagesIn'];
export type AppendOut = Schemas['AppendOut'];
export type AppendedOut = Schemas['AppendedOut'];
export type ContextOut = Schemas['ContextOut'];
export type OpenAIContextOut = Schemas['OpenAIContextOut'];
export type TurnOut = Schemas['TurnOut'];
export type OpenAITurnOut = Schemas['OpenAITurnOut'];
export type EventOut = Schemas['EventOut'];
export type EventsOut = Schemas['EventsOut'];
export type ObservationsOut = Schemas['ObservationsOut'];
export type CycleOut = Schemas['CycleOut'];
export type RecallOut = Schemas['RecallOut'];
export type ProfileOut = Schemas['ProfileOut'];
export type ProfilesOut = Schemas['ProfilesOut'];
export type ModelsOut = Schemas['ModelsOut'];
export type ChatCompletionOut = Schemas['ChatCompletionOut'];
export type ErrorBody = Schemas['ErrorBody'];
export type OpenAIError = Schemas['OpenAIError'];
/** A `data-om-*` part as the AI SDK frames data parts: `{type, id, data}`. */
export type Part = Schemas['Part'];

/** A message as an append takes it: an OpenAI chat message or an AI SDK UI message (docs/api.md). */
export type MessageInput = MessagesIn['messages'][number];

type Method = 'get' | 'put' | 'post' | 'delete';
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

export type ListQuery = QueryOf<Operation<'/v1/threads', 'get'>>;
export type ContextQuery = QueryOf<Operation<'/v1/threads/{thread_id}/context', 'get'>>;
export type TurnQuery = QueryOf<Operation<'/v1/threads/{thread_id}/turn', 'post'>>;
export type AppendQuery = QueryOf<Operation<'/v1/threads/{thread_id}/messages', 'post'>>;
export type EventsQuery = QueryOf<Operation<'/v1/threads/{thread_id}/events', 'get'>>;
export type ObservationsQuery = QueryOf<Operation<'/v1/threads/{thread_id}/observations', 'get'>>;
export type RecallQuery = QueryOf<Operation<'/v1/threads/{thread_id}/recall', 'get'>>;

/** The answer of a context read or a turn in the requested `format`. */
export type ContextFor<F> = F extends 'openai' ? OpenAIContextOut : ContextOut;
export type TurnFor<F> = F extends 'openai' ? OpenAITurnOut : TurnOut;

/**
 * A message as om stores it and returns it in a context window (`format: 'om'`): camelCase, AI SDK part
 * shapes. The schema leaves window messages open (`{[key]: unknown}`); this is their stored form
 * (docs/semantics.md).
 */
export interface StoredMessage {
  id: string;
  role: 'user' | 'assistant' | 'system' | 'tool';
  createdAt: string;
  threadId?: string;
  model?: string;
  metadata?: Record<string, unknown>;
  parts: StoredPart[];
}

export type StoredPart =
  | { type: 'text'; text: string; createdAt?: string }
  | { type: 'reasoning'; text: string; createdAt?: string }
  | { type: 'image'; url: string; mimeType?: string; filename?: string; detail?: string; createdAt?: string }
  | { type: 'file'; url: string; mimeType: string; filename?: string; createdAt?: string }
  | {
      type: 'tool-invocation';
      toolCallId: string;
      toolName: string;
      state: string;
      args?: unknown;
      result?: unknown;
      error?: string;
      approval?: Record<string, unknown>;
      createdAt?: string;
    }
  | { type: `data-${string}`; data?: unknown; createdAt?: string };
