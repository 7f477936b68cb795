// The AI SDK middleware against a real `om serve`, with the AI SDK's own mock language models, for ai 6
// (LanguageModelV3, MockLanguageModelV3) and ai 7 (LanguageModelV4, MockLanguageModelV4): generateText and
// streamText drive the conversation as an app would, resending the whole history each call.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as ai6 from 'ai';
import * as ai6test from 'ai/test';
import * as ai7 from 'ai-v7';
import * as ai7test from 'ai-v7/test';
import { OMClient, type EventOut } from '../src/index.js';
import { callerModelOf, omMemory } from '../src/ai-sdk/index.js';
import { KEY, omServer, uniqueId } from './om-server.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- the two SDK majors share these shapes, not types */
type Any = any;

interface Sdk {
  name: string;
  spec: 'v3' | 'v4';
  generateText: (options: Any) => Promise<Any>;
  streamText: (options: Any) => Any;
  wrapLanguageModel: (options: Any) => Any;
  jsonSchema: (schema: Any) => Any;
  stepCountIs: (count: number) => Any;
  simulateReadableStream: (options: Any) => ReadableStream<Any>;
  APICallError: new (options: Any) => Error;
  convertToModelMessages: (messages: Any[]) => Promise<Any[]>;
  Mock: new (options: Any) => Any;
}

const SDKS: Sdk[] = [
  { name: 'ai 6 (LanguageModelV3)', spec: 'v3', ...(ai6 as Any), Mock: (ai6test as Any).MockLanguageModelV3 },
  { name: 'ai 7 (LanguageModelV4)', spec: 'v4', ...(ai7 as Any), Mock: (ai7test as Any).MockLanguageModelV4 },
];

let om: OMClient;

before(async () => {
  om = new OMClient({ baseUrl: await omServer(after), apiKey: KEY });
});

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const stop = { unified: 'stop', raw: 'stop' };

/** What a model answers, as a generate result or as a stream of chunks. */
function generated(content: Any[], finishReason = stop) {
  return { content, finishReason, usage, warnings: [] };
}

function streamed(sdk: Sdk, text: string) {
  const words = text.split(/(?<= )/);
  return {
    stream: sdk.simulateReadableStream({
      chunks: [
        { type: 'stream-start', warnings: [] },
        { type: 'text-start', id: 't1' },
        ...words.map((delta) => ({ type: 'text-delta', id: 't1', delta })),
        { type: 'text-end', id: 't1' },
        { type: 'finish', finishReason: stop, usage },
      ],
    }),
  };
}

type PromptMessage = { role: string; content: Any };

const textOf = (message: PromptMessage): string =>
  typeof message.content === 'string'
    ? message.content
    : (message.content as Any[]).map((p) => (p.type === 'text' ? p.text : '')).join('');

/** The answer the mock gives to a prompt: it repeats the newest user message's fact number. */
function answerTo(prompt: PromptMessage[]): string {
  const question = [...prompt].reverse().find((m) => m.role === 'user');
  const fact = /Fact (\d+)/.exec(question ? textOf(question) : '')?.[1] ?? '?';
  return `Noted fact ${fact}, thank you.`;
}

async function stored(threadId: string): Promise<EventOut[]> {
  const events: EventOut[] = [];
  for await (const event of om.allEvents(threadId, { types: 'MessageAppended' })) events.push(event);
  return events;
}

const FACTS = [
  ['sister', 'Priya', 'Lisbon', 'architect'],
  ['neighbour', 'Tomasz', 'Gdansk', 'baker'],
  ['cousin', 'Amara', 'Accra', 'nurse'],
  ['colleague', 'Kenji', 'Osaka', 'pilot'],
  ['friend', 'Lucia', 'Bogota', 'violinist'],
];

const fact = (i: number) => {
  const [relation, name, city, job] = FACTS[i % FACTS.length] as string[];
  return `Fact ${i}: my ${relation} ${name}${i} lives in ${city} and works as a ${job}; we meet on day ${i}.`;
};

for (const sdk of SDKS) {
  describe(sdk.name, () => {
    test('a 50-turn conversation, half streamed: stored once, later prompts carry the observations', async () => {
      const threadId = uniqueId('chat50');
      const model = new sdk.Mock({
        // provider metadata om does not keep (as a reasoning signature would be): it must come back to the
        // model in the app's own copy of the message
        doGenerate: async (options: Any) =>
          generated([
            {
              type: 'text',
              text: answerTo(options.prompt),
              providerMetadata: { mock: { signed: answerTo(options.prompt) } },
            },
          ]),
        doStream: async (options: Any) => streamed(sdk, answerTo(options.prompt)),
      });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      const history: Any[] = [];
      const system = 'You are a friendly assistant who remembers people.';
      for (let i = 0; i < 50; i++) {
        history.push({ role: 'user', content: fact(i) });
        if (i % 2 === 0) {
          const result = await sdk.generateText({ model: wrapped, system, messages: history });
          assert.equal(result.text, `Noted fact ${i}, thank you.`);
          history.push(...result.response.messages);
        } else {
          const result = sdk.streamText({ model: wrapped, system, messages: history });
          let text = '';
          for await (const delta of result.textStream) text += delta;
          assert.equal(text, `Noted fact ${i}, thank you.`);
          history.push(...(await result.response).messages);
        }
      }

      const messages = await stored(threadId);
      assert.equal(messages.length, 100, 'each of the 100 messages is stored once');
      assert.equal(new Set(messages.map((e) => e.data['message_id'])).size, 100);
      assert.deepEqual(
        messages.map((e) => e.data['role']),
        Array.from({ length: 100 }, (_, i) => (i % 2 ? 'assistant' : 'user')),
      );
      assert.deepEqual(
        messages.filter((e) => e.data['role'] === 'user').map((e) => e.data['text']),
        Array.from({ length: 50 }, (_, i) => fact(i)),
      );
      assert.deepEqual(
        messages.filter((e) => e.data['role'] === 'assistant').map((e) => e.data['text']),
        Array.from({ length: 50 }, (_, i) => `Noted fact ${i}, thank you.`),
      );
      assert.ok(
        messages
          .filter((e) => e.data['role'] === 'assistant')
          .every((e) => e.data['model'] === 'mock-provider/mock-model-id'),
      );

      const prompts: PromptMessage[][] = [...model.doGenerateCalls, ...model.doStreamCalls].map((c: Any) => c.prompt);
      assert.equal(prompts.length, 50);
      const last = model.doStreamCalls.at(-1).prompt as PromptMessage[];
      assert.deepEqual(last[0], { role: 'system', content: system }, "the app's instructions open the prompt");
      const memory = last
        .filter((m) => m.role === 'system')
        .map(textOf)
        .join('\n');
      assert.match(memory, /<observations>/);
      const raw = last
        .filter((m) => m.role !== 'system')
        .map(textOf)
        .join('\n');
      assert.ok(last.length < 40, `the prompt stays bounded (${last.length} messages for a history of 99)`);
      const remembered = Array.from({ length: 10 }, (_, i) => `${FACTS[i % 5]?.[1]}${i}`).filter(
        (name) => memory.includes(name) && !raw.includes(name),
      );
      assert.ok(remembered.length >= 3, `early facts reach the model through memory only (${remembered.join(', ')})`);
      const replies = last.filter((m) => m.role === 'assistant');
      const generatedReplies = replies.filter((m) => Number(/fact (\d+)/.exec(textOf(m))?.[1]) % 2 === 0);
      assert.ok(generatedReplies.length > 0);
      for (const reply of generatedReplies) {
        assert.deepEqual((reply.content as Any[])[0].providerOptions, { mock: { signed: textOf(reply) } });
      }
      const firstWithMemory = prompts.findIndex((p) =>
        p.some((m) => m.role === 'system' && textOf(m).includes('<observations>')),
      );
      assert.ok(firstWithMemory > 0 && firstWithMemory < 40, `observations appear part-way (call ${firstWithMemory})`);

      // the app asks again with the same history: nothing new is stored
      await sdk.generateText({ model: wrapped, system, messages: history.slice(0, -1) });
      assert.equal((await stored(threadId)).length, 100, 'a regenerated answer with the same words is a duplicate');
    });

    test('a useChat route: UI messages converted each request, the reply streamed as a UI message stream', async () => {
      const threadId = uniqueId('ui');
      const model = new sdk.Mock({ doStream: async (options: Any) => streamed(sdk, answerTo(options.prompt)) });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      let ui: Any[] = [];
      for (let i = 0; i < 6; i++) {
        // what useChat posts: the whole conversation as UI messages, with their ids
        ui = [...ui, { id: `ui-${i}`, role: 'user', parts: [{ type: 'text', text: fact(i) }] }];
        const result = sdk.streamText({ model: wrapped, messages: await sdk.convertToModelMessages(ui) });
        const finished = new Promise<Any[]>((resolve) => {
          const chunks = result.toUIMessageStream({
            originalMessages: ui,
            onFinish: ({ messages }: Any) => resolve(messages),
          });
          void (async () => {
            for await (const chunk of chunks) void chunk;
          })();
        });
        ui = await finished;
      }
      assert.equal(ui.length, 12);
      const messages = await stored(threadId);
      assert.deepEqual(
        messages.map((e) => `${e.data['role']}:${e.data['text']}`),
        Array.from({ length: 6 }, (_, i) => [`user:${fact(i)}`, `assistant:Noted fact ${i}, thank you.`]).flat(),
      );
      // the reply om stored is the message the app sends back: the prompt carries the app's own copy
      const last = model.doStreamCalls.at(-1).prompt as PromptMessage[];
      assert.deepEqual(
        last
          .filter((m) => m.role === 'assistant')
          .map(textOf)
          .slice(-1),
        ['Noted fact 4, thank you.'],
      );
    });

    test('a call the AI SDK retries after a provider error stores its message once', async () => {
      const threadId = uniqueId('retry');
      let calls = 0;
      const model = new sdk.Mock({
        doGenerate: async (options: Any) => {
          calls++;
          if (calls === 1) {
            throw new sdk.APICallError({
              message: 'overloaded',
              url: 'http://provider',
              requestBodyValues: {},
              statusCode: 529,
              isRetryable: true,
            });
          }
          return generated([{ type: 'text', text: answerTo(options.prompt) }]);
        },
      });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      const result = await sdk.generateText({ model: wrapped, messages: [{ role: 'user', content: fact(7) }] });
      assert.equal(calls, 2);
      assert.equal(result.text, 'Noted fact 7, thank you.');
      assert.deepEqual(
        (await stored(threadId)).map((e) => e.data['role']),
        ['user', 'assistant'],
      );
    });

    test('an app that sends only the new message: om supplies the history, a repeated "yes" is a new message', async () => {
      const threadId = uniqueId('newonly');
      const model = new sdk.Mock({
        doGenerate: async (options: Any) =>
          generated([{ type: 'text', text: `I see ${options.prompt.length} messages.` }]),
      });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      for (const prompt of ['Shall we book the train?', 'yes', 'And the hotel?', 'yes']) {
        await sdk.generateText({ model: wrapped, prompt });
      }
      const messages = await stored(threadId);
      assert.deepEqual(
        messages.map((e) => `${e.data['role']}:${e.data['text']}`),
        [
          'user:Shall we book the train?',
          'assistant:I see 1 messages.',
          'user:yes',
          'assistant:I see 3 messages.',
          'user:And the hotel?',
          'assistant:I see 5 messages.',
          'user:yes',
          'assistant:I see 7 messages.',
        ],
      );
      // a call the AI SDK retries stores its message once
      let calls = 0;
      const flaky = new sdk.Mock({
        doGenerate: async () => {
          calls++;
          if (calls === 1) {
            throw new sdk.APICallError({
              message: 'timeout',
              url: 'http://provider',
              requestBodyValues: {},
              statusCode: 503,
              isRetryable: true,
            });
          }
          return generated([{ type: 'text', text: 'Booked.' }]);
        },
      });
      const again = sdk.wrapLanguageModel({ model: flaky, middleware: omMemory({ client: om, threadId }) });
      await sdk.generateText({ model: again, prompt: 'Book both, please.' });
      assert.equal(calls, 2);
      const after = await stored(threadId);
      assert.deepEqual(
        after.slice(8).map((e) => `${e.data['role']}:${e.data['text']}`),
        ['user:Book both, please.', 'assistant:Booked.'],
      );
    });

    test('tool calls: the call, its result and the answer are stored once, and the next step sees them', async () => {
      const threadId = uniqueId('tools');
      const model = new sdk.Mock({
        doGenerate: async (options: Any) => {
          const lastMessage = options.prompt.at(-1);
          if (lastMessage.role === 'tool') {
            const output = lastMessage.content[0].output.value;
            return generated([{ type: 'text', text: `It is ${output.celsius} degrees in ${output.city}.` }]);
          }
          const city = /in (\w+)/.exec(textOf(lastMessage))?.[1] ?? 'nowhere';
          return generated(
            [{ type: 'tool-call', toolCallId: `call-${city}`, toolName: 'weather', input: JSON.stringify({ city }) }],
            { unified: 'tool-calls', raw: 'tool_calls' },
          );
        },
      });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      const tools = {
        weather: {
          description: 'the weather in a city',
          inputSchema: sdk.jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }),
          execute: async ({ city }: { city: string }) => ({ city, celsius: city.length + 15 }),
        },
      };
      const history: Any[] = [{ role: 'user', content: 'What is the weather in Lisbon?' }];
      const first = await sdk.generateText({ model: wrapped, messages: history, tools, stopWhen: sdk.stepCountIs(3) });
      assert.equal(first.text, 'It is 21 degrees in Lisbon.');
      history.push(...first.response.messages, { role: 'user', content: 'And in Oslo?' });
      const second = await sdk.generateText({ model: wrapped, messages: history, tools, stopWhen: sdk.stepCountIs(3) });
      assert.equal(second.text, 'It is 19 degrees in Oslo.');

      const messages = await stored(threadId);
      assert.deepEqual(
        messages.map((e) => e.data['role']),
        ['user', 'assistant', 'tool', 'assistant', 'user', 'assistant', 'tool', 'assistant'],
      );
      const invocations = messages.flatMap((e) =>
        ((e.data['message'] as Any).parts as Any[])
          .filter((p) => p.type === 'tool-invocation')
          .map((p) => `${p.state}:${p.toolCallId}`),
      );
      assert.deepEqual(invocations, ['call:call-Lisbon', 'result:call-Lisbon', 'call:call-Oslo', 'result:call-Oslo']);
      // the step after a tool call is sent the call and its result
      const step = model.doGenerateCalls[1].prompt as PromptMessage[];
      assert.deepEqual(
        step.slice(-2).map((m) => m.role),
        ['assistant', 'tool'],
      );
      assert.equal((step.at(-1)?.content as Any[])[0].toolCallId, 'call-Lisbon');
    });

    test('images and files are stored as om holds them and come back from its window as file parts', async () => {
      const threadId = uniqueId('files');
      const png = new Uint8Array([
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 73, 72, 68, 82, 1, 2, 3, 4,
      ]);
      const pdf = new TextEncoder().encode('%PDF-1.4 a tiny document');
      const base64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64');
      // room for the attachments' tokens, so the message stays in the window rather than being observed
      await om.putThread(threadId, { config: { observation: { messageTokens: 20_000 } } });
      const model = new sdk.Mock({
        doGenerate: async () => generated([{ type: 'text', text: 'A picture and a file.' }]),
      });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      await sdk.generateText({
        model: wrapped,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What are these?' },
              { type: 'file', data: png, mediaType: 'image/png' },
              { type: 'file', data: pdf, mediaType: 'application/pdf', filename: 'notes.pdf' },
            ],
          },
        ],
      });
      const [question] = await stored(threadId);
      assert.deepEqual(
        (question?.data['message'] as Any).parts.map((p: Any) => [p.type, p.mimeType ?? null, p.url ?? null]),
        [
          ['text', null, null],
          ['image', 'image/png', `data:image/png;base64,${base64(png)}`],
          ['file', 'application/pdf', `data:application/pdf;base64,${base64(pdf)}`],
        ],
      );
      // the next call sends only its new message: the earlier one comes from om's window
      await sdk.generateText({ model: wrapped, prompt: 'Thanks.' });
      const earlier = (model.doGenerateCalls[1].prompt as PromptMessage[]).find(
        (m) => m.role === 'user' && textOf(m) === 'What are these?',
      );
      const files = (earlier?.content as Any[]).filter((p) => p.type === 'file');
      const data = (p: Any) => (sdk.spec === 'v4' ? (assert.equal(p.data.type, 'data'), p.data.data) : p.data);
      assert.deepEqual(
        files.map((p) => [p.mediaType, data(p), p.filename]),
        [
          ['image/png', base64(png), undefined],
          ['application/pdf', base64(pdf), 'notes.pdf'],
        ],
      );
    });

    test('a stream cut short or failing stores no answer', async () => {
      const threadId = uniqueId('cut');
      // a provider's stream that sends half an answer, then nothing until the call is aborted
      const endless = (signal: AbortSignal) => {
        let sent = false;
        return new ReadableStream({
          pull(controller) {
            if (sent) {
              return new Promise<void>((resolve) => {
                signal.addEventListener('abort', () => {
                  controller.error(signal.reason);
                  resolve();
                });
              });
            }
            sent = true;
            controller.enqueue({ type: 'stream-start', warnings: [] });
            controller.enqueue({ type: 'text-start', id: 't' });
            controller.enqueue({ type: 'text-delta', id: 't', delta: 'Half an ans' });
            return undefined;
          },
        });
      };
      const model = new sdk.Mock({ doStream: async (options: Any) => ({ stream: endless(options.abortSignal) }) });
      const wrapped = sdk.wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
      const abort = new AbortController();
      const result = sdk.streamText({
        model: wrapped,
        prompt: 'Tell me a long story.',
        abortSignal: abort.signal,
        onError: () => undefined,
      });
      for await (const delta of result.textStream) {
        assert.equal(delta, 'Half an ans');
        abort.abort();
      }
      const failing = new sdk.Mock({
        doStream: async () => ({
          stream: sdk.simulateReadableStream({
            chunks: [
              { type: 'text-start', id: 't' },
              { type: 'text-delta', id: 't', delta: 'Oops' },
              { type: 'error', error: new Error('the provider dropped the connection') },
            ],
          }),
        }),
      });
      const broken = sdk.wrapLanguageModel({ model: failing, middleware: omMemory({ client: om, threadId }) });
      const second = sdk.streamText({ model: broken, prompt: 'Try again.', onError: () => undefined });
      for await (const delta of second.textStream) void delta;
      assert.deepEqual(
        (await stored(threadId)).map((e) => `${e.data['role']}:${e.data['text']}`),
        ['user:Tell me a long story.', 'user:Try again.'],
      );
    });
  });
}

test('the thread can be named per call, and the caller model is named as om names models', async () => {
  const threadId = uniqueId('percall');
  const model = new ai6test.MockLanguageModelV3({
    doGenerate: async () => generated([{ type: 'text', text: 'ok' }]) as Any,
  });
  const wrapped = ai6.wrapLanguageModel({ model, middleware: omMemory({ client: om }) });
  await ai6.generateText({ model: wrapped, prompt: 'hello', providerOptions: { om: { threadId } } });
  assert.deepEqual(
    (await stored(threadId)).map((e) => e.data['role']),
    ['user', 'assistant'],
  );
  assert.equal(model.doGenerateCalls[0]?.providerOptions?.['om'], undefined, 'om options are not sent to the model');
  await assert.rejects(ai6.generateText({ model: wrapped, prompt: 'hello' }), /threadId/);
  assert.equal(callerModelOf({ provider: 'openai.responses', modelId: 'gpt-5-mini' }), 'openai/gpt-5-mini');
  assert.equal(
    callerModelOf({ provider: 'google.generative-ai', modelId: 'gemini-2.5-flash' }),
    'gemini/gemini-2.5-flash',
  );
  assert.equal(
    callerModelOf({ provider: 'gateway', modelId: 'anthropic/claude-sonnet-4.5' }),
    'anthropic/claude-sonnet-4.5',
  );
});
