// A real third-party MCP client (the official TypeScript SDK) for `/mcp`,
// run by tests/api/mcp.rs. It drives a whole lifecycle as an agent, meets a
// refusal, and tries a token without the permission; it prints one JSON line
// per step on stdout for the Rust test to check against the event log.
//
//   node tests/node/mcp.mjs <base url> <agent token> <reader token>

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [base, agentToken, readerToken] = process.argv.slice(2);
if (!base || !agentToken || !readerToken) {
  console.error('usage: node mcp.mjs <base url> <agent token> <reader token>');
  process.exit(2);
}

const print = (line) => console.log(JSON.stringify(line));

async function connect(token) {
  const client = new Client({ name: 'work-ledger-test', version: '1.0.0' });
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } });
  await client.connect(transport);
  return client;
}

// A tool call as the test wants to see it: the structured result or error.
async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  return { isError: result.isError === true, body: result.structuredContent ?? null };
}

try {
  // No token: the transport is refused before any MCP message.
  try {
    await connect(null);
    print({ step: 'anonymous', connected: true });
  } catch (err) {
    print({ step: 'anonymous', connected: false, error: String(err.message ?? err) });
  }

  const agent = await connect(agentToken);
  print({ step: 'agent tools', tools: (await agent.listTools()).tools.map((t) => t.name).sort() });

  const claimed = await call(agent, 'claim_next', { leaseSeconds: 600 });
  print({ step: 'claim_next', ...claimed });
  const unitId = claimed.body?.unit?.id;
  print({ step: 'start_work', ...(await call(agent, 'start_work', { unitId })) });
  // The refusal: starting twice.
  print({ step: 'start_work again', ...(await call(agent, 'start_work', { unitId })) });
  print({ step: 'record_cost', ...(await call(agent, 'record_cost', { unitId, cents: 420, idempotencyKey: 'mcp-bill-1' })) });
  print({ step: 'verify', ...(await call(agent, 'verify', { unitId, evidenceUrl: 'https://ci.example/mcp/1' })) });
  print({ step: 'my_work', ...(await call(agent, 'my_work', {})) });
  print({ step: 'dispose', ...(await call(agent, 'dispose', { unitId, disposition: 'MIGRATED' })) });
  await agent.close();

  const reader = await connect(readerToken);
  print({ step: 'reader tools', tools: (await reader.listTools()).tools.map((t) => t.name).sort() });
  print({ step: 'reader claim_next', ...(await call(reader, 'claim_next', {})) });
  print({ step: 'reader get_unit', ...(await call(reader, 'get_unit', { unitId })) });
  await reader.close();
  print({ step: 'done' });
} catch (err) {
  console.error(JSON.stringify({ step: 'error', error: String(err?.stack ?? err) }));
  process.exit(1);
}
