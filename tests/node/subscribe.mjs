// A real third-party client for `GET /graphql/ws`: the graphql-ws library
// (the one GraphiQL and most JavaScript clients use), run by
// tests/api/node_client.rs. It subscribes to blockingQuestionOpened and
// prints one JSON line per event on stdout, then exits after `count` payloads.
//
//   node tests/node/subscribe.mjs <ws url> <token> [count]

import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, token, count = '1'] = process.argv.slice(2);
if (!url || !token) {
  console.error('usage: node subscribe.mjs <ws url> <token> [count]');
  process.exit(2);
}

const print = (line) => console.log(JSON.stringify(line));
const fail = (what) => {
  console.error(JSON.stringify({ event: 'error', what }));
  process.exit(1);
};

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
  lazy: false,
  retryAttempts: 0,
  on: {
    connected: () => print({ event: 'connected' }),
    closed: (e) => print({ event: 'closed', code: e?.code, reason: e?.reason }),
  },
});

let left = Number(count);
const unsubscribe = client.subscribe(
  { query: 'subscription { blockingQuestionOpened { id unitId question status } }' },
  {
    next: (result) => {
      print({ event: 'next', result });
      if (--left === 0) {
        unsubscribe();
        client.dispose().then(() => process.exit(0));
      }
    },
    error: (err) =>
      fail(err && typeof err === 'object' && 'code' in err ? { code: err.code, reason: err.reason } : String(err)),
    complete: () => fail('the server completed the subscription'),
  },
);
