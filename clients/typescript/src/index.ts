export { OMClient, OMStream } from './client.js';
export type {
  AppendOptions,
  CallOptions,
  ChatCompletionOptions,
  ContextOptions,
  MessagesOptions,
  OMClientOptions,
  ProxyStatus,
  Readiness,
  StreamOptions,
  TurnOptions,
} from './client.js';
export { OMConnectionError, OMError } from './errors.js';
export type { OMErrorCode, ServiceError } from './errors.js';
export type { StreamPart } from './sse.js';
export type * from './types.js';
