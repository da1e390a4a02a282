#!/usr/bin/env node
// A stand-in for a model server, for the README's tour. It is NOT a model: it answers an
// OpenAI-compatible Chat Completions request with a fixed rule, so the tour can show one agent
// turn through the gate without an API key or a real model.
//
//   npm run demo-model            # listens on 127.0.0.1:$DEMO_MODEL_PORT (default 11435)
//
// Point an `openai` connection at it with `extra.base_url` http://127.0.0.1:11435/v1 (any
// credential works). What it answers, for `POST /v1/chat/completions`:
//
//   1. the conversation's last message is a tool result -> text summarising that result;
//   2. the last user message says "run workflow <id>" and the request offers the `workflow_run`
//      tool -> one call of `workflow_run` {workflow_id: <id>, payload: {name: "agent"}}, a tool
//      that stops at the service's gate until a person approves it;
//   3. anything else -> text echoing the user's message.
//
// Both shapes the service asks for are served: a JSON answer, and with `stream: true` an event
// stream of `data: {chunk}` lines ending with `data: [DONE]`. `GET /v1/models` answers a model
// list, so the connection's test passes. Plain node:http, no dependencies, loopback only.

import { createServer } from 'node:http';

const port = Number(process.env.DEMO_MODEL_PORT ?? 11435);
const MODEL = 'demo';

/** Decides the reply: `{text}` or `{toolCall: {name, args}}`. */
function decide(messages, tools) {
  const last = messages.at(-1);
  if (last?.role === 'tool') return { text: `The tool answered: ${String(last.content).slice(0, 500)}` };
  const user = [...messages].reverse().find((m) => m.role === 'user');
  const content = typeof user?.content === 'string' ? user.content : '';
  const offered = new Set((tools ?? []).map((t) => t.function?.name));
  const wanted = /run workflow (\d+)/i.exec(content);
  if (wanted && offered.has('workflow_run')) {
    return { toolCall: { name: 'workflow_run', args: { workflow_id: Number(wanted[1]), payload: { name: 'agent' } } } };
  }
  return { text: `You said: ${content}` };
}

/** Rough token counts, so the service's telemetry has something to add up. */
const tokens = (text) => Math.max(1, Math.ceil(text.length / 4));

function answerJson(res, reply, usage, id) {
  const message = reply.toolCall
    ? {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: `call_${id}`, type: 'function', function: { name: reply.toolCall.name, arguments: JSON.stringify(reply.toolCall.args) } }],
      }
    : { role: 'assistant', content: reply.text };
  const body = {
    id: `chatcmpl-${id}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: MODEL,
    choices: [{ index: 0, message, finish_reason: reply.toolCall ? 'tool_calls' : 'stop' }],
    usage,
  };
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

function answerStream(res, reply, usage, id) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const chunk = (choices, extra = {}) =>
    res.write(`data: ${JSON.stringify({ id: `chatcmpl-${id}`, object: 'chat.completion.chunk', model: MODEL, choices, ...extra })}\n\n`);
  if (reply.toolCall) {
    const call = { index: 0, id: `call_${id}`, type: 'function', function: { name: reply.toolCall.name, arguments: JSON.stringify(reply.toolCall.args) } };
    chunk([{ index: 0, delta: { role: 'assistant', tool_calls: [call] }, finish_reason: null }]);
  } else {
    // One chunk per word, as a model streams tokens.
    for (const word of reply.text.match(/\S+\s*/g) ?? []) chunk([{ index: 0, delta: { content: word }, finish_reason: null }]);
  }
  chunk([{ index: 0, delta: {}, finish_reason: reply.toolCall ? 'tool_calls' : 'stop' }]);
  // The usage chunk the service asks for with stream_options.include_usage.
  chunk([], { usage });
  res.end('data: [DONE]\n\n');
}

let seq = 0;
const server = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => (raw += c));
  req.on('end', () => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/v1/models') {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'demo' }] }));
      return;
    }
    if (req.method !== 'POST' || path !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `no route ${req.method} ${path}` } }));
      return;
    }
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'body is not JSON' } }));
      return;
    }
    const messages = Array.isArray(body.messages) ? body.messages : [];
    const reply = decide(messages, body.tools);
    const out = reply.toolCall ? JSON.stringify(reply.toolCall.args) : reply.text;
    const usage = { prompt_tokens: tokens(JSON.stringify(messages)), completion_tokens: tokens(out), total_tokens: 0 };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const id = ++seq;
    console.log(`${new Date().toISOString()} ${body.stream ? 'stream' : 'json'} -> ${reply.toolCall ? `tool call ${reply.toolCall.name}` : 'text'}`);
    if (body.stream) answerStream(res, reply, usage, id);
    else answerJson(res, reply, usage, id);
  });
});

server.listen(port, '127.0.0.1', () => console.log(`Demo model (a stand-in, not a model) on http://127.0.0.1:${port}/v1`));
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => server.close(() => process.exit(0)));
