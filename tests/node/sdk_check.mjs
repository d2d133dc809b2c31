// The official Node SDK (npm `openai`) against a tailgate simulator or gateway; run by test_node_sdk.py.
// Usage: node sdk_check.mjs BASE_URL MODEL SIM_ROOT MODE   (MODE: sim | gateway)
// Prints one JSON line: {"passed": [names of the checks that passed]}; any failed check throws (exit 1).
import OpenAI from "openai";

const [base, model, simRoot, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: "sk-good", maxRetries: 0, timeout: 15000 });
const messages = [{ role: "user", content: "hello" }];
const tools = [
  { type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } },
];
const passed = [];

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function faults(body) {
  const init = body
    ? { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } }
    : { method: "DELETE" };
  const r = await fetch(`${simRoot}/sim/faults`, init);
  check(r.ok, `set faults ${JSON.stringify(body)}`);
}

async function expectError(cls, fn, what) {
  try {
    await fn();
  } catch (err) {
    check(err instanceof cls, `${what}: expected ${cls.name}, got ${err && err.constructor && err.constructor.name}: ${err}`);
    passed.push(what);
    return;
  }
  throw new Error(`${what}: no error`);
}

// chat, non-stream: exact usage and message.refusal null
const plain = await client.chat.completions.create({ model, messages, max_tokens: 5 });
check(plain.usage.completion_tokens === 5, "non-stream usage");
check(plain.choices[0].message.refusal === null, "refusal null");
passed.push("chat");

// chat, stream with usage
let text = 0;
let usage = null;
for await (const chunk of await client.chat.completions.create({
  model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
})) {
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length && chunk.choices[0].delta.content) text += 1;
}
check(text === 6 && usage && usage.completion_tokens === 6, `stream: ${text} tokens, usage ${JSON.stringify(usage)}`);
passed.push("chat_stream");

// thinking on (the provider's own switch and budget): reasoning_content streams before content
let kinds = "";
for await (const chunk of await client.chat.completions.create({
  model, messages, max_tokens: 10, stream: true, enable_thinking: true, thinking_budget: 4,
})) {
  const d = chunk.choices.length ? chunk.choices[0].delta : {};
  if (d.reasoning_content) kinds += "r";
  else if (d.content) kinds += "c";
}
check(kinds === "rrrrcccccc", `thinking stream order ${kinds}`);
passed.push("thinking_on");

// thinking off
const off = await client.chat.completions.create({
  model, messages, max_tokens: 4, chat_template_kwargs: { enable_thinking: false },
});
check(off.choices[0].message.reasoning_content === undefined, "no reasoning when off");
check(off.choices[0].message.content.trim().split(/\s+/).length === 4, "answer when off");
passed.push("thinking_off");

// tool calls, stream and not
const calls = [];
let finish = null;
for await (const chunk of await client.chat.completions.create({
  model, messages, tools, tool_choice: "required", stream: true,
})) {
  if (!chunk.choices.length) continue;
  calls.push(...(chunk.choices[0].delta.tool_calls || []));
  finish = chunk.choices[0].finish_reason || finish;
}
check(calls.length >= 2 && calls[0].function.name === "lookup", "tool call deltas");
check("q" in JSON.parse(calls.map((c) => c.function.arguments || "").join("")), "tool call arguments");
check(finish === "tool_calls", "finish tool_calls");
const called = await client.chat.completions.create({ model, messages, tools, tool_choice: "required" });
check(called.choices[0].message.tool_calls[0].function.name === "lookup", "non-stream tool call");
passed.push("tools");

// the Responses API, stream and not
const resp = await client.responses.create({ model, input: "hello", max_output_tokens: 7 });
check(resp.output_text.trim().split(/\s+/).length === 7, `responses text ${resp.output_text}`);
let deltas = 0;
let completed = null;
for await (const ev of await client.responses.create({ model, input: "hi", max_output_tokens: 3, stream: true })) {
  if (ev.type === "response.output_text.delta") deltas += 1;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") completed = ev.response;
}
check(deltas === 3 && completed && completed.usage.output_tokens === 3, "responses stream");
passed.push("responses");

// errors to the right classes
await expectError(OpenAI.NotFoundError, () => client.chat.completions.create({ model: "nope", messages }), "error_404");
await expectError(OpenAI.BadRequestError, () => client.chat.completions.create({ model, messages: [] }), "error_400");
if (mode === "sim") {
  const wrong = new OpenAI({ baseURL: base, apiKey: "sk-wrong", maxRetries: 0 });
  await expectError(OpenAI.AuthenticationError, () => wrong.chat.completions.create({ model, messages }), "error_401");
}
await faults({ quota_exhausted: true });
await expectError(OpenAI.RateLimitError, () => client.chat.completions.create({ model, messages, max_tokens: 2 }), "error_429");
await faults(null);
await faults({ error_rate: 1.0, error_statuses: [500] });
await expectError(OpenAI.InternalServerError, () => client.chat.completions.create({ model, messages, max_tokens: 2 }), "error_5xx");
await faults(null);
if (mode === "gateway") {
  // a stream cut after output began ends with an SSE error event: the SDK throws APIError
  await faults({ disconnect_after_tokens: 2 });
  await expectError(OpenAI.APIError, async () => {
    for await (const _ of await client.chat.completions.create({ model, messages, max_tokens: 8, stream: true })) {
      // consume
    }
  }, "error_mid_stream");
  await faults(null);
}
console.log(JSON.stringify({ passed }));
