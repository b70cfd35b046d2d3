// BullMQ on Redis, one drain, for benches/peers.rs. Prints one JSON line.
//
//   node bullmq.mjs --url redis://127.0.0.1:PORT/ [--jobs 20000]
//       [--concurrency 8] [--name x] [--keep N]
//
// `--jobs` jobs are added with `Queue.addBulk` (chunks of 1,000: its docs'
// advice for speed, one round trip per chunk) before the clock starts; a
// `Worker` with `concurrency` and `autorun: false` connects; the clock
// starts at `worker.run()` and stops at the `completed` event of the last
// job (emitted once its move to the completed set returned). Everything
// else is BullMQ's default: lock 30 s renewed every 15 s, a stalled-job
// check every 30 s, `maxStalledCount` 1, finished jobs kept in the
// completed set (`--keep N` sets `removeOnComplete: { count: N }`, as its
// "going to production" page advises). Checks that every job ran once and
// that nothing is left waiting, active, delayed or failed. Prints
// {"jobs_per_s", "duplicates", "lost", "calls", "completed_set"}.

import { Queue, Worker } from "bullmq";
import { args, emit, Seen } from "./common.mjs";

const a = args();
const url = new URL(a.url);
const connection = {
  host: url.hostname,
  port: Number(url.port || 6379),
  // What BullMQ sets for a Worker's connection anyway (its docs: "going to
  // production", maxRetriesPerRequest).
  maxRetriesPerRequest: null,
};
const name = `bull_${a.name}`;
const queue = new Queue(name, { connection });
queue.on("error", (e) => process.stderr.write(`bullmq queue: ${e.message}\n`));

try {
  await queue.obliterate({ force: true });
  for (let from = 0; from < a.jobs; from += 1000) {
    const jobs = [];
    for (let n = from; n < Math.min(from + 1000, a.jobs); n++) {
      jobs.push({ name: "bench", data: { n } });
    }
    await queue.addBulk(jobs);
  }
  const seen = new Seen(a.jobs);
  let completed = 0;
  let done;
  const all = new Promise((resolve) => (done = resolve));
  const options = { connection, concurrency: a.concurrency, autorun: false };
  if (a.keep !== undefined) options.removeOnComplete = { count: Number(a.keep) };
  const worker = new Worker(
    name,
    async (job) => {
      seen.run(job.data.n);
    },
    options,
  );
  worker.on("error", (e) => process.stderr.write(`bullmq worker: ${e.message}\n`));
  worker.on("failed", (job, e) => process.stderr.write(`bullmq job ${job?.id} failed: ${e.message}\n`));
  worker.on("completed", () => {
    if (++completed === a.jobs) done();
  });
  await worker.waitUntilReady();
  const t0 = performance.now();
  const running = worker.run();
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`stuck at ${completed} of ${a.jobs}`)), 120000);
  });
  await Promise.race([all, limit]);
  const t1 = performance.now();
  clearTimeout(timer);
  await worker.close();
  await running;
  const counts = await queue.getJobCounts(
    "active",
    "completed",
    "delayed",
    "failed",
    "paused",
    "prioritized",
    "waiting",
    "waiting-children",
  );
  const left = Object.entries(counts).filter(([state, c]) => state !== "completed" && c > 0);
  if (left.length > 0) throw new Error(`left in the queue: ${JSON.stringify(counts)}`);
  await queue.obliterate({ force: true });
  emit({
    peer: "bullmq",
    jobs_per_s: a.jobs / ((t1 - t0) / 1000),
    ...seen.check(),
    calls: seen.calls,
    completed_set: counts.completed,
  });
} finally {
  await queue.close();
}
