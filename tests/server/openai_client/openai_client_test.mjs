// The official openai npm package as the real client of `nanovllm serve` (the demo model: random weights, the
// real Qwen3 tokenizer): completions and chat, whole and streamed, include_usage, stop, seeds, logprobs, the API
// key, errors; tools and reasoning through the hermes and qwen3 parsers, on the real server (requests with
// tools) and on a scripted engine's server whose answers hold reasoning and tool calls.
//   node openai_client_test.mjs NANOVLLM MODEL_DIR SCRIPTED_SERVER
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import readline from "node:readline";

import OpenAI from "openai";

const [nanovllm, model, scriptedServer] = process.argv.slice(2);

// Starts a server process; resolves once its startup line names the port.
async function start(command, args) {
  const proc = spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] });
  const lines = readline.createInterface({ input: proc.stdout });
  const line = await new Promise((resolve, reject) => {
    lines.once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`${command} exited with ${code} before it listened`)));
  });
  const match = line.match(/on http:\/\/127\.0\.0\.1:(\d+) /);
  assert.ok(match, `no startup line: ${line}`);
  return { proc, port: Number(match[1]) };
}

// SIGTERM; the exit code must be 0.
async function stop(server) {
  const exited = new Promise((resolve) => server.proc.once("exit", (code) => resolve(code)));
  server.proc.kill("SIGTERM");
  assert.equal(await exited, 0, "exit code after SIGTERM");
}

function client(server, apiKey = "test-key") {
  return new OpenAI({ baseURL: `http://127.0.0.1:${server.port}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const COMPLETION = { model: "demo", prompt: "The capital of France is", max_tokens: 12, temperature: 0 };
const CHAT = { model: "demo", messages: [{ role: "user", content: "Say hello" }], max_tokens: 12, temperature: 0 };
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

const tests = {
  async models(api) {
    const models = await api.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ["demo"],
    );
  },

  async completionWholeAndStreamed(api) {
    const whole = await api.completions.create(COMPLETION);
    assert.match(whole.id, /^cmpl-/);
    assert.equal(whole.object, "text_completion");
    assert.equal(whole.usage.completion_tokens, 12);
    const chunks = await collect(await api.completions.create({ ...COMPLETION, stream: true }));
    const text = chunks.map((c) => c.choices[0].text).join("");
    assert.equal(text, whole.choices[0].text);
    assert.equal(chunks.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
  },

  async chatWholeAndStreamedWithUsage(api) {
    const whole = await api.chat.completions.create(CHAT);
    assert.match(whole.id, /^chatcmpl-/);
    assert.equal(whole.choices[0].message.role, "assistant");
    const chunks = await collect(
      await api.chat.completions.create({ ...CHAT, stream: true, stream_options: { include_usage: true } }),
    );
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.deepEqual(usage.usage, whole.usage);
    const content = chunks
      .slice(0, -1)
      .map((c) => c.choices[0].delta.content ?? "")
      .join("");
    assert.equal(content, whole.choices[0].message.content);
    assert.equal(chunks.at(-2).choices[0].finish_reason, whole.choices[0].finish_reason);
  },

  async stop(api) {
    const free = await api.completions.create({ ...COMPLETION, max_tokens: 24 });
    const text = free.choices[0].text;
    // Two ASCII letters from the second third of the greedy text: the output ends right before them.
    let at = Math.floor(text.length / 3);
    while (at + 1 < text.length && !/^[A-Za-z]{2}$/.test(text.slice(at, at + 2))) at++;
    assert.ok(at + 1 < text.length, `no ASCII letters to stop at in ${JSON.stringify(text)}`);
    const stop = text.slice(at, at + 2);
    const expected = text.slice(0, text.indexOf(stop));
    const stopped = await api.completions.create({ ...COMPLETION, max_tokens: 24, stop: [stop] });
    assert.equal(stopped.choices[0].text, expected);
    assert.equal(stopped.choices[0].finish_reason, "stop");
    const chunks = await collect(await api.completions.create({ ...COMPLETION, max_tokens: 24, stop, stream: true }));
    assert.equal(chunks.map((c) => c.choices[0].text).join(""), expected);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
  },

  async seedReproducibility(api) {
    const sampled = { ...CHAT, temperature: 1.0, max_tokens: 16 };
    const a = await api.chat.completions.create({ ...sampled, seed: 1234 });
    const b = await api.chat.completions.create({ ...sampled, seed: 1234 });
    const c = await api.chat.completions.create({ ...sampled, seed: 4321 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
    const chunks = await collect(await api.chat.completions.create({ ...sampled, seed: 1234, stream: true }));
    assert.equal(chunks.map((x) => x.choices[0].delta.content ?? "").join(""), a.choices[0].message.content);
  },

  async logprobs(api) {
    const completion = await api.completions.create({ ...COMPLETION, logprobs: 3 });
    const lp = completion.choices[0].logprobs;
    assert.equal(lp.tokens.length, completion.usage.completion_tokens);
    assert.equal(lp.tokens.join(""), completion.choices[0].text);
    assert.ok(lp.token_logprobs.every((x) => x <= 0));
    assert.ok(lp.top_logprobs.every((top) => Object.keys(top).length >= 3));
    const chat = await api.chat.completions.create({ ...CHAT, logprobs: true, top_logprobs: 2 });
    const content = chat.choices[0].logprobs.content;
    assert.equal(content.length, chat.usage.completion_tokens);
    assert.ok(content.every((t) => t.top_logprobs.length === 2 && Array.isArray(t.bytes)));
    const chunks = await collect(
      await api.chat.completions.create({ ...CHAT, logprobs: true, top_logprobs: 2, stream: true }),
    );
    const streamed = chunks.flatMap((c) => c.choices[0].logprobs?.content ?? []);
    assert.deepEqual(
      streamed.map((t) => t.token),
      content.map((t) => t.token),
    );
  },

  async errors(api, server) {
    await assert.rejects(api.completions.create({ ...COMPLETION, n: 2 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.error?.param, "n");
      return true;
    });
    await assert.rejects(api.chat.completions.create({ ...CHAT, model: "gpt-4o" }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      return true;
    });
    await assert.rejects(client(server, "wrong-key").models.list(), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
      return true;
    });
  },

  async toolsAndReasoningFields(api) {
    // The demo model's random answers hold no calls, but the request renders its tools through the chat
    // template and the answer comes back in the parsers' shape.
    const whole = await api.chat.completions.create({ ...CHAT, tools: TOOLS, tool_choice: "auto" });
    const message = whole.choices[0].message;
    assert.ok(Array.isArray(message.tool_calls));
    assert.ok("reasoning_content" in message);
    const chunks = await collect(await api.chat.completions.create({ ...CHAT, tools: TOOLS, stream: true }));
    assert.equal(
      chunks.map((c) => c.choices[0].delta.content ?? "").join(""),
      message.content ?? "",
    );
    const thinking = await api.chat.completions.create({
      ...CHAT,
      chat_template_kwargs: { enable_thinking: false },
    });
    assert.equal(thinking.choices[0].message.reasoning_content, null);
  },
};

const SCRIPT =
  "<think>\nThe user asks for the weather in Paris.\n</think>\n\nLet me look it up.\n<tool_call>\n" +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

const scriptedTests = {
  async reasoningAndToolCalls(api) {
    const request = {
      model: "demo",
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: TOOLS,
      max_tokens: Math.ceil(SCRIPT.length / 3),
      ignore_eos: true,
    };
    const whole = await api.chat.completions.create(request);
    const message = whole.choices[0].message;
    assert.equal(message.reasoning_content, "The user asks for the weather in Paris.");
    assert.equal(message.content, "Let me look it up.");
    assert.equal(message.tool_calls.length, 1);
    const call = message.tool_calls[0];
    assert.match(call.id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
    assert.equal(whole.choices[0].finish_reason, "tool_calls");

    const chunks = await collect(await api.chat.completions.create({ ...request, stream: true }));
    const reasoning = chunks.map((c) => c.choices[0].delta.reasoning_content ?? "").join("");
    const content = chunks.map((c) => c.choices[0].delta.content ?? "").join("");
    const calls = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    assert.equal(reasoning, message.reasoning_content);
    assert.equal(content, message.content);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].index, 0);
    assert.deepEqual(calls[0].function, call.function);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "tool_calls");

    // Without tools (or with tool_choice "none") the calls stay text.
    const plain = await api.chat.completions.create({ ...request, tool_choice: "none" });
    assert.match(plain.choices[0].message.content, /<tool_call>/);
  },
};

async function runAll(server, suite, failures) {
  const api = client(server);
  for (const [name, test] of Object.entries(suite)) {
    const started = Date.now();
    try {
      await test(api, server);
      console.log(`ok   ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failures.push(name);
      console.log(`FAIL ${name}: ${e.stack ?? e}`);
    }
  }
}

const failures = [];
const engineFlags = ["--device", "cpu", "--kvcache-block-size", "16", "--num-kvcache-blocks", "256", "--seed", "1"];
const real = await start(nanovllm, [
  "serve", "--model", model, "--served-model-name", "demo", "--port", "0", "--api-key", "test-key",
  "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes", ...engineFlags,
]);
try {
  await runAll(real, tests, failures);
} finally {
  await stop(real);
}
const scripted = await start(scriptedServer, [model, SCRIPT]);
try {
  await runAll(scripted, scriptedTests, failures);
} finally {
  await stop(scripted);
}
const total = Object.keys(tests).length + Object.keys(scriptedTests).length;
console.log(`${total - failures.length} passed, ${failures.length} failed${failures.length ? ": " + failures : ""}`);
process.exit(failures.length ? 1 : 0);
