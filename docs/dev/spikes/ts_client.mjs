// TS SDK 1.32 client (2025-11-25 only) against our server; run via 05_ts_interop.py (needs node_modules with the SDK).
// Usage: node ts_client.mjs <mcp url> <token> <webhook base> <form|url>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ElicitRequestSchema, ElicitationCompleteNotificationSchema, UrlElicitationRequiredError, McpError, ErrorCode,
  LATEST_PROTOCOL_VERSION,
} from '@modelcontextprotocol/sdk/types.js';

const [url, token, webhookBase, modes] = process.argv.slice(2);
const user = token.slice(4);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },  // bearer header (or authProvider: OAuthClientProvider)
});
// {elicitation: {form: {}, url: {}}} = both modes; {elicitation: {form: {}}} (or {}) = form only
const capabilities = { elicitation: modes === 'url' ? { form: {}, url: {} } : { form: {} } };
const client = new Client({ name: 'ts-spike', version: '0.0.0' }, { capabilities });

const completed = new Map();  // elicitationId -> resolve
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => {
  console.log('TS got notifications/elicitation/complete', n.params.elicitationId);
  completed.get(n.params.elicitationId)?.();
});
const waitComplete = (id) => new Promise((res) => completed.set(id, res));
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  console.log('TS got elicitation/create', req.params.mode, req.params.url);
  setTimeout(() => fetch(`${webhookBase}/fake-webhook/${req.params.elicitationId}?user=${user}`, { method: 'POST' }), 300);
  return { action: 'accept' };
});

await client.connect(transport);
console.log('TS negotiated', client.getServerVersion()?.name, 'LATEST_PROTOCOL_VERSION =', LATEST_PROTOCOL_VERSION,
            'session', transport.sessionId);
try {
  const r = await client.callTool({ name: 'paid_32042', arguments: {} });
  console.log('TS first call result:', r.isError, r.content[0].text);
} catch (e) {
  console.log('TS caught', e.constructor.name, e.code === ErrorCode.UrlElicitationRequired, e instanceof McpError);
  if (e instanceof UrlElicitationRequiredError) {
    const el = e.elicitations[0];
    console.log('TS elicitation', el.mode, el.url, el.elicitationId);
    const done = waitComplete(el.elicitationId);
    await fetch(`${webhookBase}/fake-webhook/${el.elicitationId}?user=${user}`, { method: 'POST' });
    await done;
    const r = await client.callTool({ name: 'paid_32042', arguments: {} });
    console.log('TS retry result:', r.content[0].text);
  }
}
if (modes === 'url') {
  let progress = 0;
  const r = await client.callTool({ name: 'paid_create', arguments: {} }, undefined, { onprogress: () => progress++ });
  console.log('TS paid_create:', r.content[0].text, 'progress notifications:', progress);
}
await transport.terminateSession();
await client.close();
