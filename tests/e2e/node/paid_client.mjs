// A TypeScript SDK (1.32, protocol 2025-11-25) client calling a paid tool; driven by
// tests/e2e/paywall/test_typescript_client.py.
//
// Usage: MCP_URL=http://127.0.0.1:PORT/mcp MCP_TOKEN=... node paid_client.mjs <url|form>
//   url:  declares elicitation {form, url}; expects -32042 (UrlElicitationRequiredError), reports it, waits for
//         notifications/elicitation/complete with that id (someone else pays), retries the tool, reports the result.
//   form: declares elicitation {form} only; calls the tool once and reports its result (expected: an error
//         result carrying the payment link).
// Output: one JSON object per line on stdout (events: connected, elicitation, completed, result,
// unexpected_elicitation, error). Exit 0 on success, 1 on any failure (after an "error" line), 2 on bad usage.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ElicitRequestSchema,
  ElicitationCompleteNotificationSchema,
  UrlElicitationRequiredError,
} from '@modelcontextprotocol/sdk/types.js';

const TOOL = 'ascii_chart';
const TOOL_ARGS = { values: [3, 1, 2], labels: ['a', 'b', 'c'] };
const COMPLETION_TIMEOUT_MS = Number(process.env.COMPLETION_TIMEOUT_MS ?? 60_000);

/** Write one JSON line and resolve once it has been handed to the OS (stdout is a pipe). */
function emit(event) {
  return new Promise((resolve) => process.stdout.write(`${JSON.stringify(event)}\n`, () => resolve()));
}

async function fail(stage, error) {
  await emit({
    event: 'error',
    stage,
    name: error?.constructor?.name ?? typeof error,
    code: error?.code,
    message: String(error?.message ?? error),
    data: error?.data,
  });
  process.exit(1);
}

function textOf(result) {
  return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function resultEvent(result) {
  return { event: 'result', isError: Boolean(result.isError), text: textOf(result) };
}

const mode = process.argv[2];
const { MCP_URL: url, MCP_TOKEN: token } = process.env;
if (!['url', 'form'].includes(mode) || !url || !token) {
  process.stderr.write('usage: MCP_URL=... MCP_TOKEN=... node paid_client.mjs <url|form>\n');
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
// An elicitation capability without `url` means form only (getSupportedElicitationModes in client/index.js).
const capabilities = { elicitation: mode === 'url' ? { form: {}, url: {} } : { form: {} } };
const client = new Client({ name: 'paid-mcp-e2e-ts', version: '0.0.0' }, { capabilities });
client.onerror = (error) => process.stderr.write(`client error: ${error?.stack ?? error}\n`);

// The SDK answers a URL-mode elicitation/create itself (InvalidParams) when `url` was not declared, before any
// handler runs, so watch the raw incoming messages too. Protocol.connect() chains an onmessage set beforehand.
const unexpected = [];
transport.onmessage = (message) => {
  if (message.method === 'elicitation/create') {
    unexpected.push(emit({ event: 'unexpected_elicitation', mode: message.params?.mode, params: message.params }));
  }
};
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' }));

// Completions can in principle arrive before anyone waits for them: remember them all.
const completed = new Set();
const waiters = new Map();
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (notification) => {
  const id = notification.params.elicitationId;
  completed.add(id);
  waiters.get(id)?.();
});
function completion(id) {
  return new Promise((resolve, reject) => {
    if (completed.has(id)) return resolve();
    const timer = setTimeout(
      () => reject(new Error(`no notifications/elicitation/complete for ${id} within ${COMPLETION_TIMEOUT_MS} ms`)),
      COMPLETION_TIMEOUT_MS,
    );
    waiters.set(id, () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

try {
  await client.connect(transport);
} catch (error) {
  await fail('connect', error);
}
await emit({ event: 'connected', protocolVersion: transport.protocolVersion, sessionId: transport.sessionId ?? null });

if (mode === 'form') {
  let result;
  try {
    result = await client.callTool({ name: TOOL, arguments: TOOL_ARGS });
  } catch (error) {
    await fail('call', error);
  }
  await emit(resultEvent(result));
} else {
  let first;
  try {
    first = { result: await client.callTool({ name: TOOL, arguments: TOOL_ARGS }) };
  } catch (error) {
    first = { error };
  }
  if (!(first.error instanceof UrlElicitationRequiredError) || first.error.elicitations.length !== 1) {
    const got = first.error ?? { message: 'expected -32042 (URL elicitation required)', data: resultEvent(first.result) };
    await fail('call', got);
  }
  const [elicitation] = first.error.elicitations;
  const done = completion(elicitation.elicitationId);
  await emit({
    event: 'elicitation',
    mode: elicitation.mode,
    url: elicitation.url,
    elicitationId: elicitation.elicitationId,
    message: elicitation.message,
  });
  try {
    await done;
  } catch (error) {
    await fail('wait_for_completion', error);
  }
  await emit({ event: 'completed', elicitationId: elicitation.elicitationId });
  let retried;
  try {
    retried = await client.callTool({ name: TOOL, arguments: TOOL_ARGS });
  } catch (error) {
    await fail('retry', error);
  }
  await emit(resultEvent(retried));
}

await Promise.all(unexpected);
try {
  await transport.terminateSession();
  await client.close();
} catch (error) {
  await fail('close', error);
}
process.exit(0);
