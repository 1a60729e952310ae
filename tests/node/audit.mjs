// The GraphQL-over-HTTP conformance audit of the `graphql-http` package (the
// specification's reference implementation), run against the real server by
// tests/api/node_client.rs with a bearer token added to every request.
// Prints one JSON line per audit that is not ok, then a summary line, and
// exits non-zero on any error or warning. Notices (MAY) are printed only.
//
//   node tests/node/audit.mjs <http url of /graphql> <token>

import { auditServer } from 'graphql-http';

const [url, token] = process.argv.slice(2);
if (!url || !token) {
  console.error('usage: node audit.mjs <url> <token>');
  process.exit(2);
}

const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const results = await auditServer({ url, fetchFn });
const count = { ok: 0, notice: 0, warn: 0, error: 0 };
for (const result of results) {
  count[result.status] += 1;
  if (result.status === 'ok') continue;
  let body = '';
  try {
    body = await result.response.clone().text();
  } catch {
    // The audit read the body already.
  }
  const status = result.response ? result.response.status : undefined;
  console.log(JSON.stringify({ audit: result.status, id: result.id, name: result.name, reason: result.reason, status, body }));
}
console.log(JSON.stringify({ summary: count, total: results.length }));
process.exit(count.warn + count.error > 0 ? 1 : 0);
