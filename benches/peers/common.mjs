// What the peers' scripts share: their arguments, the wall clock in µs, the
// delays of the lateness workload (the same xorshift64* and seed as
// benches/postgres/late.rs), the duplicate and loss check, and the one JSON
// line each script prints.

import { performance } from "node:perf_hooks";

/**
 * `--name value` pairs from argv, with environment fallbacks:
 * jobs (PEERS_JOBS, 20000), concurrency (PEERS_CONCURRENCY, 8), url
 * (PEERS_URL), workload (drain), config (tuned), seed (0), spread (2000 ms),
 * inflight (256), pool (10).
 */
export function args() {
  const given = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
      throw new Error(`expected --name value pairs, got ${argv.slice(i).join(" ")}`);
    }
    given[argv[i].slice(2)] = argv[i + 1];
  }
  const int = (name, env, fallback) => {
    const raw = given[name] ?? process.env[env] ?? String(fallback);
    const value = Number(raw);
    if (!Number.isInteger(value)) throw new Error(`--${name}: not an integer: ${raw}`);
    return value;
  };
  const url = given.url ?? process.env.PEERS_URL;
  if (!url) throw new Error("--url (or PEERS_URL) is required");
  return {
    jobs: int("jobs", "PEERS_JOBS", 20000),
    concurrency: int("concurrency", "PEERS_CONCURRENCY", 8),
    url,
    workload: given.workload ?? "drain",
    config: given.config ?? "tuned",
    name: given.name ?? `peers_${process.pid}`,
    seed: int("seed", "PEERS_SEED", 0),
    spread: int("spread", "PEERS_SPREAD_MS", 2000),
    inflight: int("inflight", "PEERS_IN_FLIGHT", 256),
    pool: int("pool", "PEERS_POOL", 10),
    batchDelay: int("batch-delay", "PEERS_GRAPHILE_BATCH_DELAY_MS", 0),
    pollInterval: given["poll-interval"] ? Number(given["poll-interval"]) : undefined,
    keep: given.keep,
  };
}

/** Wall clock, µs since the epoch (fractional). */
export function wallUs() {
  return (performance.timeOrigin + performance.now()) * 1000;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `n` delays in ms, each in [0, spread]: xorshift64* seeded with `seed`,
 * as `Rng(seed).below(spread + 1)` in the Rust benches.
 */
export function delays(seed, n, spread) {
  const mask = (1n << 64n) - 1n;
  const mult = 0x2545f4914f6cdd1dn;
  let s = BigInt(seed) & mask;
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s >> 12n;
    s = (s ^ (s << 25n)) & mask;
    s ^= s >> 27n;
    out[i] = Number(((s * mult) & mask) % BigInt(spread + 1));
  }
  return out;
}

/** Counts of runs per job number, checked once the drain is over. */
export class Seen {
  constructor(n) {
    this.counts = new Uint32Array(n);
    this.distinct = 0;
    this.calls = 0;
  }

  /** Records a run of job `n`; true when every job has run at least once. */
  run(n) {
    this.calls++;
    if (this.counts[n]++ === 0) this.distinct++;
    return this.distinct === this.counts.length;
  }

  /** { duplicates, lost }: job numbers run more than once, never. */
  check() {
    let duplicates = 0;
    let lost = 0;
    for (const c of this.counts) {
      if (c > 1) duplicates++;
      if (c === 0) lost++;
    }
    return { duplicates, lost };
  }
}

/** Resolves when `done()` is true, checking every `everyMs`; rejects after `limitMs`. */
export async function until(what, done, everyMs = 1, limitMs = 120000) {
  const start = performance.now();
  while (!(await done())) {
    if (performance.now() - start > limitMs) throw new Error(`${what}: stuck`);
    await sleep(everyMs);
  }
}

/** The p-th percentile (0-100) of sorted `v`, as the Rust benches index it. */
export function pct(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(Math.floor((sorted.length * p) / 100), sorted.length - 1)];
}

/** Prints the result line and ends the process. */
export function emit(result) {
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
