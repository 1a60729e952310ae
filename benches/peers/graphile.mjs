// graphile-worker as a peer of `cargo bench --bench load`: the same database
// server, no-op jobs, `concurrency` workers in one Node process. Each job is
// graphile-worker's own get_job + complete_job (two transactions).
//
//   node graphile.mjs <connection-string> <concurrency> <seconds> <jobs> <pool-size>
//
// Prints one JSON line: {"jobs": <completed in the window>, "seconds": <window>}.
// The first second after start is a warm-up and not counted.
import { EventEmitter } from "node:events";
import pg from "pg";
import { Logger, run, runMigrations } from "graphile-worker";

const [connectionString, concurrencyArg, secondsArg, jobsArg, poolArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg ?? 64);
const seconds = Number(secondsArg ?? 10);
const jobs = Number(jobsArg ?? 100000);
const maxPoolSize = Number(poolArg ?? concurrency);
const logger = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});

await runMigrations({ connectionString, logger });
const pool = new pg.Pool({ connectionString, max: 2 });
await pool.query(
  `SELECT graphile_worker.add_jobs((SELECT array_agg(ROW('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec)
                                      FROM generate_series(1, $1)))`,
  [jobs],
);
await pool.query("VACUUM ANALYZE graphile_worker._private_jobs");
await pool.end();

const events = new EventEmitter();
let done = 0;
events.on("job:success", () => {
  done += 1;
});
const runner = await run({
  connectionString,
  concurrency,
  maxPoolSize,
  noHandleSignals: true,
  pollInterval: 1000,
  taskList: { noop: async () => {} },
  events,
  logger,
});
await new Promise((r) => setTimeout(r, 1000));
const start = done;
const t0 = process.hrtime.bigint();
await new Promise((r) => setTimeout(r, seconds * 1000));
const counted = done - start;
const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
await runner.stop();
console.log(JSON.stringify({ jobs: counted, seconds: elapsed, leftover: jobs - done }));
