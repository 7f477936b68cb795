// Message ids for a prompt's messages, so that om, which stores a message id once, stores each message once
// although the AI SDK sends the whole history on every call (and again on a retry).
//
// The prompt carries no ids. As om's OpenAI-compatible proxy does for id-less chat histories, a message's id
// is derived from the thread, the id of the message before it and what it says: the same message sent
// again in the same place has the same id (a duplicate, not a second copy), while the same words later in
// the conversation ("yes") follow another message and get a new id. Chained this way, one id stands for the
// whole history before it.
//
// A prompt with an assistant message carries its own place: the ids are chained from its first message. A
// prompt without one (the first call of a conversation, or an app that sends only the new message and lets
// om keep the history) is placed on the thread's stored tail instead, by the proxy's rules: it is a repeat
// of what the thread ends with, possibly followed by replies om stored that the app never got (a retried
// call whose answer was lost), when its ids are found there; otherwise it follows the thread's last message.
import { canonicalJson, sha256Hex } from '../hash.js';
import type { OmMessage, PromptMessage } from './messages.js';

export const ID_PREFIX = 'aisdk-';
// replies om may hold that the app never received (as the proxy's TRAILING_REPLIES)
export const TRAILING_REPLIES = 4;

/** The digest a message's id is derived from: what om is sent (role and parts), or, for a message om
 * cannot hold, the prompt message itself. */
export function signature(message: OmMessage | undefined, raw: PromptMessage): Promise<string> {
  const subject = message ? { role: message.role, parts: message.parts } : { role: raw.role, content: raw.content };
  return sha256Hex(canonicalJson(subject));
}

export async function chainIds(threadId: string, anchor: string, signatures: readonly string[]): Promise<string[]> {
  const ids: string[] = [];
  let previous = anchor;
  for (const digest of signatures) {
    previous = ID_PREFIX + (await sha256Hex(`${threadId}\n${previous}\n${digest}`)).slice(0, 32);
    ids.push(previous);
  }
  return ids;
}

export interface StoredTail {
  /** The thread's last messages, oldest first. */
  messages: readonly { id: string; role: string }[];
  /** Whether they are all the thread has. */
  whole: boolean;
}

export interface Placement {
  ids: string[];
  /** The id a reply follows when the prompt has no conversation message. */
  anchor: string;
}

/** Ids for a prompt with no assistant message, placed on the thread's stored tail (see above). */
export async function placeOnTail(
  threadId: string,
  signatures: readonly string[],
  tail: StoredTail,
): Promise<Placement> {
  const stored = tail.messages;
  const count = signatures.length;
  const last = stored.length ? (stored[stored.length - 1] as { id: string }).id : '';
  if (count === 0) return { ids: [], anchor: last };
  const ends = [stored.length];
  for (let j = stored.length - 1; j >= Math.max(stored.length - TRAILING_REPLIES, 0); j--) {
    if (stored[j]?.role !== 'assistant') break;
    ends.push(j);
  }
  for (const end of ends) {
    const before = end - count - 1;
    // the message the run would follow: seen, or none when the run starts the thread (what is known when the
    // whole thread was read; a run longer than what was read can only be recognised if it starts it)
    if (end < 1 || (before === -1 && !tail.whole) || (before < -1 && tail.whole)) continue;
    const anchor = before >= 0 ? (stored[before] as { id: string }).id : '';
    const startsThread = before < 0;
    // a single message repeated after a reply is new; only a retry of the thread's last message is not
    if (end !== stored.length && count < 2 && !startsThread) continue;
    const ids = await chainIds(threadId, anchor, signatures);
    if (ids[count - 1] === stored[end - 1]?.id) return { ids, anchor };
  }
  return { ids: await chainIds(threadId, last, signatures), anchor: last };
}
