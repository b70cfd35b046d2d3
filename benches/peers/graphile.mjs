// graphile-worker on PostgreSQL, one run of one workload, for
// benches/peers.rs. Prints one JSON line.
//
//   node graphile.mjs --url postgres://... --workload drain|late \
//       --config tuned|default [--jobs 20000] [--concurrency 8] [--name x]
//       [--seed s --spread 2000 --inflight 256]   (late)
//       [--batch-delay 0] [--poll-interval ms]
//
// Configurations:
// - tuned: as the performance page of its docs ran its figures
//   (website/docs/performance.md, "Quick stats"): `localQueue: { size: 500 }`,
//   `completeJobBatchDelay: 0`, `failJobBatchDelay: 0` (`--batch-delay`
//   changes both; the page suggests 250 as a starting point).
// - default: none of these (local queue off, completions one by one).
// Both: `concurrency` jobs at once, a pg pool of `--pool` (10, its
// `maxPoolSize` default) that the worker and the producer share, the
// default `pollInterval` (2 s) unless `--poll-interval`.
//
// drain: `--jobs` jobs due now are added with `addJobs` (chunks of 1,000)
// before the clock starts; the pool's connections are opened; the clock
// starts before `run()` and stops when the jobs table is empty (every job
// completed and its completion written, batched or not). Prints
// {"jobs_per_s", "handled_per_s" (clock stopped at the last handler
// instead), "duplicates", "lost"}.
//
// late: the runner starts, then one producer adds `--jobs` jobs with
// `addJob(..., { runAt: now + delay })`, `--inflight` calls at once, each
// delay 0 to `--spread` ms (seeded as benches/postgres/late.rs). Lateness
// is the wall clock when the handler starts minus the job's `run_at` (ms
// precision, as PostgreSQL returned it to node-postgres). Prints
// {"p50_ms", "p99_ms", "after_p99_ms" (jobs due after the last addJob
// returned), "after_n", "inserts_per_s", "early", "duplicates", "lost",
// "delays_sum"}.

import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import { args, delays, emit, pct, Seen, sleep, until, wallUs } from "./common.mjs";

const a = args();
const schema = `gw_${a.name}`.replace(/[^a-z0-9_]/gi, "_").toLowerCase();
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  }
});

function preset() {
  const worker = { concurrentJobs: a.concurrency, maxPoolSize: a.pool };
  if (a.pollInterval !== undefined) worker.pollInterval = a.pollInterval;
  if (a.config === "tuned") {
    worker.localQueue = { size: 500 };
    worker.completeJobBatchDelay = a.batchDelay;
    worker.failJobBatchDelay = a.batchDelay;
  } else if (a.config !== "default") {
    throw new Error(`--config: tuned or default, not ${a.config}`);
  }
  return { worker };
}

const pool = new pg.Pool({ connectionString: a.url, max: a.pool });
// graphile-worker asks for both handlers on a pool it is given.
pool.on("error", (e) => process.stderr.write(`pg pool: ${e.message}\n`));
pool.on("connect", (client) =>
  client.on("error", (e) => process.stderr.write(`pg client: ${e.message}\n`)),
);

async function remaining() {
  const { rows } = await pool.query(`select count(*)::int as c from "${schema}"._private_jobs`);
  return rows[0].c;
}

/** Opens every connection of the pool, so no run pays for connecting. */
async function warm() {
  const clients = [];
  for (let i = 0; i < a.pool; i++) clients.push(await pool.connect());
  for (const c of clients) c.release();
}

function start(task) {
  return run({
    pgPool: pool,
    schema,
    logger,
    concurrency: a.concurrency,
    noHandleSignals: true,
    crontab: "",
    taskList: { bench: task },
    preset: preset(),
  });
}

async function drain(utils) {
  for (let from = 0; from < a.jobs; from += 1000) {
    const specs = [];
    for (let n = from; n < Math.min(from + 1000, a.jobs); n++) {
      specs.push({ identifier: "bench", payload: { n } });
    }
    await utils.addJobs(specs);
  }
  await warm();
  const seen = new Seen(a.jobs);
  let allRan;
  const ran = new Promise((resolve) => (allRan = resolve));
  const t0 = performance.now();
  const runner = await start(async (payload) => {
    if (seen.run(payload.n)) allRan();
  });
  await ran;
  const handled = performance.now();
  await until("completions", async () => (await remaining()) === 0);
  const t1 = performance.now();
  await runner.stop();
  return {
    jobs_per_s: a.jobs / ((t1 - t0) / 1000),
    handled_per_s: a.jobs / ((handled - t0) / 1000),
    ...seen.check(),
    calls: seen.calls,
  };
}

async function late(utils) {
  const due = delays(a.seed, a.jobs, a.spread);
  const seen = new Seen(a.jobs);
  const lateness = new Float64Array(a.jobs);
  const dueUs = new Float64Array(a.jobs);
  let early = 0;
  await warm();
  const runner = await start(async (payload, helpers) => {
    const started = wallUs();
    const at = helpers.job.run_at.getTime() * 1000;
    if (started < at) early++;
    lateness[payload.n] = started - at;
    dueUs[payload.n] = at;
    seen.run(payload.n);
  });
  await sleep(200); // listening
  const t0 = wallUs();
  let next = 0;
  const producer = async () => {
    while (next < a.jobs) {
      const n = next++;
      const runAt = new Date(Math.floor(wallUs() / 1000) + due[n]);
      await utils.addJob("bench", { n }, { runAt });
    }
  };
  await Promise.all(Array.from({ length: a.inflight }, producer));
  const inserted = wallUs();
  await until("runs", () => seen.distinct === a.jobs, 2);
  await until("completions", async () => (await remaining()) === 0);
  await runner.stop();
  const all = Array.from(lateness).sort((x, y) => x - y);
  const after = Array.from(lateness)
    .filter((_, n) => dueUs[n] > inserted)
    .sort((x, y) => x - y);
  return {
    p50_ms: pct(all, 50) / 1000,
    p99_ms: pct(all, 99) / 1000,
    after_p99_ms: pct(after, 99) / 1000,
    after_n: after.length,
    inserts_per_s: a.jobs / ((inserted - t0) / 1e6),
    early,
    ...seen.check(),
    calls: seen.calls,
    delays_sum: due.reduce((s, d) => s + d, 0),
  };
}

try {
  await pool.query(`drop schema if exists "${schema}" cascade`);
  await runMigrations({ pgPool: pool, schema, logger });
  const utils = await makeWorkerUtils({ pgPool: pool, schema, logger });
  let result;
  if (a.workload === "drain") result = await drain(utils);
  else if (a.workload === "late") result = await late(utils);
  else throw new Error(`--workload: drain or late, not ${a.workload}`);
  await utils.release();
  await pool.query(`drop schema "${schema}" cascade`);
  emit({ peer: `graphile-worker ${a.config}`, ...result });
} finally {
  await pool.end();
}
