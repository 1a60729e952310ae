// A small triage service for work-ledger: it subscribes to the questions
// agents ask (blockingQuestionOpened, with the ones open now first), answers
// those it knows from a table with one unblock each, and lets that one
// answer serve every open question with the same text (alsoAnswerSimilar).
// A question it does not know stays open for a human (or a smarter triage).
//
//   npm install graphql-ws ws
//   node examples/triage.mjs <base url> <triage token> <answers.json> [stop after N units answered]
//
// answers.json maps a question to its answer; questions match as the ledger
// matches them: case, runs of white space and trailing punctuation folded.
//   { "Is the ROUNDING_MODE flag still read by the nightly batch?": "No: retired in 2019." }
// One JSON line per answer on stdout: {"answered": <unitId>, "question": ..., "alsoAnswered": n}.

import { readFileSync } from 'node:fs';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [base, token, answersFile, stopAfter] = process.argv.slice(2);
if (!base || !token || !answersFile) {
  console.error('usage: node triage.mjs <base url> <triage token> <answers.json> [stop after N units answered]');
  process.exit(2);
}

// The ledger's own normalisation (ledger_question_norm): lower case, white space runs as one space,
// trailing white space and punctuation dropped.
const norm = (text) => text.trim().toLowerCase().replace(/\s+/g, ' ').replace(/[\s\p{P}\p{S}]+$/u, '');
const known = new Map(Object.entries(JSON.parse(readFileSync(answersFile, 'utf8'))).map(([q, a]) => [norm(q), a]));

const UNBLOCK = `mutation($unit: UUID!, $question: UUID!, $answer: String!, $key: String!) {
  unblock(unitId: $unit, questionId: $question, answer: $answer, alsoAnswerSimilar: true, idempotencyKey: $key) { id state }
}`;

async function graphql(query, variables) {
  const response = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

const answered = new Set(); // units this triage has seen answered
const limit = stopAfter ? Number(stopAfter) : Infinity;
const client = createClient({
  url: `${base.replace(/^http/, 'ws')}/graphql/ws`,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
  retryAttempts: Infinity, // a restart of the ledger: reconnect; includeOpen resends what is still open
});

// Deliveries are handled one at a time, so a burst of the same question costs one request.
let queue = Promise.resolve();
const handle = async (question) => {
  if (answered.has(question.unitId)) return; // answered with an earlier one of its group
  const answer = known.get(norm(question.question));
  if (answer === undefined) return; // not ours to answer
  const key = `triage/${question.id}`; // a retry after a lost response replays, never answers twice
  const result = await graphql(UNBLOCK, { unit: question.unitId, question: question.id, answer, key });
  const code = result.errors?.[0]?.extensions?.code;
  if (code === 'QUESTION_NOT_OPEN') return; // answered meanwhile (by us or another triage)
  if (code) {
    console.error(JSON.stringify({ error: code, message: result.errors[0].message, unitId: question.unitId }));
    return;
  }
  const also = result.extensions?.unblock?.alsoAnsweredUnitIds ?? [];
  for (const unit of [question.unitId, ...also]) answered.add(unit);
  console.log(JSON.stringify({ answered: question.unitId, question: question.question, alsoAnswered: also.length }));
  if (answered.size >= limit) {
    await client.dispose();
    process.exit(0);
  }
};

client.subscribe(
  { query: 'subscription { blockingQuestionOpened(includeOpen: true) { id unitId question } }' },
  {
    next: ({ data, errors }) => {
      if (errors) console.error(JSON.stringify({ errors }));
      if (data) queue = queue.then(() => handle(data.blockingQuestionOpened));
    },
    error: (err) => {
      console.error(JSON.stringify({ error: String(err?.reason ?? err?.message ?? err) }));
      process.exit(1);
    },
    complete: () => process.exit(0),
  },
);
