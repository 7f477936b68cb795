import type { ErrorBody } from './types.js';

/** The service's error object: `{"error": {code, message, details}}` (docs/api.md, Errors). */
export type ServiceError = ErrorBody['error'];

/** The codes docs/api.md lists (an answer may carry another: a newer server's, or the proxy's). */
export type OMErrorCode =
  | 'malformed_json'
  | 'cursor_is_range'
  | 'cursor_ambiguous'
  | 'invalid_last_event_id'
  | 'thread_scope'
  | 'bad_request'
  | 'unauthorized'
  | 'thread_not_found'
  | 'cursor_not_found'
  | 'generation_not_found'
  | 'profile_not_found'
  | 'not_found'
  | 'method_not_allowed'
  | 'message_conflict'
  | 'profile_mismatch'
  | 'profile_conflict'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'validation_error'
  | 'invalid_message'
  | 'invalid_config'
  | 'unknown_profile'
  | 'invalid_profile_name'
  | 'resource_required'
  | 'invalid_thread_id'
  | 'invalid_resource_id'
  | 'unknown_event_type'
  | 'part_index_out_of_range'
  | 'version_out_of_range'
  | 'query_required'
  | 'cursor_required'
  | 'rate_limited'
  | 'observation_failed'
  | 'model_unavailable'
  | 'store_unavailable'
  | 'internal_error'
  | (string & {});

/**
 * An error answer from om. `code` is the service's machine-readable code (`thread_not_found`,
 * `invalid_message`, `rate_limited`, …), `details` what it said about it, `retryAfter` the seconds the
 * server asked to wait (429 and 503). The OpenAI-compatible proxy's OpenAI-shaped errors are read into the
 * same fields (its `type` and `param` land in `details`).
 */
export class OMError extends Error {
  override readonly name = 'OMError';
  readonly status: number;
  readonly code: OMErrorCode;
  readonly details: Record<string, unknown>;
  readonly retryAfter: number | undefined;
  /** The service's error object as it was sent. */
  readonly error: ServiceError;

  constructor(status: number, error: ServiceError, retryAfter?: number) {
    super(`${status} ${error.code}: ${error.message}`);
    this.status = status;
    this.code = error.code;
    this.details = error.details;
    this.retryAfter = retryAfter;
    this.error = error;
  }
}

/** om could not be reached, or the connection broke before an answer (the `cause` says how). */
export class OMConnectionError extends Error {
  override readonly name = 'OMConnectionError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

function retryAfterOf(response: Response): number | undefined {
  const value = response.headers.get('retry-after');
  if (value === null) return undefined;
  const seconds = Number(value);
  // an HTTP date is allowed by the standard; om only ever sends seconds
  return Number.isFinite(seconds) ? Math.max(0, seconds) : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The OMError of an error answer, read from om's error body (or the proxy's OpenAI-shaped one). */
export async function errorOf(response: Response): Promise<OMError> {
  const text = await response.text().catch(() => '');
  const retryAfter = retryAfterOf(response);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const error = isRecord(body) ? body['error'] : undefined;
  if (isRecord(error) && typeof error['message'] === 'string') {
    if (typeof error['code'] === 'string' && isRecord(error['details'])) {
      return new OMError(
        response.status,
        { code: error['code'], message: error['message'], details: error['details'] },
        retryAfter,
      );
    }
    // the proxy answers as OpenAI does: {error: {message, type, param, code}}
    const code = typeof error['code'] === 'string' ? error['code'] : String(error['type'] ?? 'http_error');
    return new OMError(
      response.status,
      { code, message: error['message'], details: { type: error['type'], param: error['param'] ?? null } },
      retryAfter,
    );
  }
  return new OMError(
    response.status,
    { code: 'http_error', message: text.slice(0, 500) || response.statusText, details: {} },
    retryAfter,
  );
}
