-- The tables and functions of the PostgreSQL store, in schema __SCHEMA__
-- (every queue of the schema shares them, keyed by queue name). `build()`
-- runs this file under an advisory lock, inside one transaction, when the
-- schema's version (table `meta`) is older than this file's; it is
-- idempotent. A service in another language shares a queue by calling the
-- same functions. Every change to this file after a release bumps VERSION
-- in `src/postgres/sql.rs`, or databases keep the old functions.
--
-- Times are milliseconds since the Unix epoch on the database's clock
-- (`clock_timestamp()`, read once per call).
--
-- A claim runs with plan_cache_mode force_generic_plan: its statements
-- are planned once per session. Each reads `entries` in the order of an
-- index with a LIMIT, a plan that suits a table of any size, and with the
-- many partial indexes of `entries` planning them anew at each call (what
-- the default does while a custom plan looks cheaper) cost more than
-- running them. The finishes it carries (finish_all) are planned as usual:
-- a plan made once while the table was small (a lookup by id that reads
-- every entry of the queue) would stay for the session.
--
-- Notifications on a queue's channel: the new head's due time (an
-- insert, a retry, ... see announce); 'f<id>': entry `id` finished and a
-- wait looks for it (see waits); 'c': a leased entry was cancelled.
--
-- An entry is one row of `entries`:
--   run_at   due time while pending; end of the lease while leased (due
--            again once it passes); NULL while dead
--   seq      from the sequence `seq` at insert (and at reset, retry and
--            requeue): equal `run_at` are taken in insertion order
--   token    the token of the claim that holds the lease (NULL unless
--            leased); `since`: when that claim was made
--   attempt  deliveries so far; `deadline`: when the current delivery was due
--   tick     the instant of a schedule's tick (NULL for other entries)
--   reason   why its last attempt failed (kept across retries), or why it
--            died
--   died_at  when a dead letter died
--   priority among due entries a claim takes the highest first (0 unless
--            the insert said otherwise; a tick's is 0)
--   key      the key whose limits it runs under (NULL: none, a key of its
--            own; a claim takes one entry of each key before a second)
--   max_attempts  its own deliveries before death (0: never), instead of
--            the queue's; NULL: the queue's
--   unique_ms  how long its id stays taken after it finishes (acked,
--            removed; a dead letter removed, cleared or trimmed): a row of
--            `uniques` until then
--   trace    the inserting span's trace context, handed out with each claim
--   errors   its last failed attempts (JSON [[attempt, at, reason], ...],
--            oldest first, at most 10), kept as it dies, cleared at requeue
--   schedule a dead tick's schedule (on its '<name>@<instant>' copy)
-- A paused schedule's pending tick is *parked*: its `run_at` is parked(),
-- past every real time, and its instant stays in `tick`.
-- A worker's claims carry a token '<worker id> <token>': a leased entry's
-- holder is read from its token.
-- An entry with a key or a priority other than 0 is *special*: claims and
-- reads find the plain entries (no key, priority 0) by `entries_plain` and
-- the special ones by their own indexes, so a queue without keys or
-- priorities claims as it did before keys existed.
--
-- Key limits are rows of `key_limits` ('<concurrency>,<rate max>,<rate per
-- ms>', each empty for no bound; the key '*' is the default of keys without
-- a row). A key's concurrency counts its entries leased now (lease not run
-- out); its rate counts the deliveries begun within the last `per`, kept
-- in `key_starts` (the last `max` starts of each key that has a rate).
-- Claims decide both under a transaction-level advisory lock of the key
-- that they take with pg_try_advisory_xact_lock: a claim never waits for
-- another, it skips the key another claim holds (see claim_fair).
-- A schedule is one row of `schedules`: `rec` is 'e,<period ms>,<policy>'
-- or 'c,<cron expression>'; its one live tick is the entry whose id is the
-- schedule's name and whose `tick` is set.

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

CREATE TABLE IF NOT EXISTS __SCHEMA__.meta (version integer NOT NULL);

CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.seq;

CREATE TABLE IF NOT EXISTS __SCHEMA__.entries (
    queue    text    COLLATE "C" NOT NULL,
    id       text    COLLATE "C" NOT NULL,
    seq      bigint  NOT NULL,
    run_at   bigint,
    value    text    NOT NULL,
    attempt  integer NOT NULL DEFAULT 0,
    token    text    COLLATE "C",
    since    bigint,
    deadline bigint,
    tick     bigint,
    reason   text,
    died_at  bigint,
    priority smallint NOT NULL DEFAULT 0,
    key      text    COLLATE "C",
    max_attempts integer,
    unique_ms bigint,
    PRIMARY KEY (queue, id)
);
-- VERSION 7: keys, priorities, an entry's own attempts and unique windows
-- (adding a column with a constant default rewrites nothing).
ALTER TABLE __SCHEMA__.entries
    ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS key text COLLATE "C",
    ADD COLUMN IF NOT EXISTS max_attempts integer,
    ADD COLUMN IF NOT EXISTS unique_ms bigint;
-- What plain claims read: live plain entries in due order. (Until VERSION
-- 6, `entries_due` held every live entry; a special entry kept there would
-- lie in the way of every plain claim's walk, and of the plain entries a
-- fair claim walks beside a key's backlog.)
DROP INDEX IF EXISTS __SCHEMA__.entries_due;
CREATE INDEX IF NOT EXISTS entries_plain ON __SCHEMA__.entries (queue, run_at, seq)
    WHERE run_at IS NOT NULL AND key IS NULL AND priority = 0;
-- Live special entries in due order: with entries_plain, the queue's head
-- and the first entry not yet due; whether a claim must be fair.
CREATE INDEX IF NOT EXISTS entries_special ON __SCHEMA__.entries (queue, run_at, seq)
    WHERE run_at IS NOT NULL AND (key IS NOT NULL OR priority <> 0);
-- The same by priority: the levels a fair claim visits, highest first, and
-- each level's due entries in due order.
CREATE INDEX IF NOT EXISTS entries_level ON __SCHEMA__.entries (queue, priority DESC, run_at, seq)
    WHERE run_at IS NOT NULL AND (key IS NOT NULL OR priority <> 0);
-- The same by key (NULL last: the keyless special entries): a key's next
-- due entry at a level, the keys of a queue (a loose index scan), whether
-- a key has entries waiting.
CREATE INDEX IF NOT EXISTS entries_keys ON __SCHEMA__.entries (queue, key, priority DESC, run_at, seq)
    WHERE run_at IS NOT NULL AND (key IS NOT NULL OR priority <> 0);
-- Leased entries of a key by lease end: its concurrency counts those whose
-- lease has not run out.
CREATE INDEX IF NOT EXISTS entries_held ON __SCHEMA__.entries (queue, key, run_at)
    WHERE key IS NOT NULL AND token IS NOT NULL;
-- (No index on `token`: a claim sent again after its reply was lost, and
-- the give-back of one given up on, find its leases through entries_due,
-- between a lower bound of their end the client knows and now + lease.
-- One index less to write on every claim.)
DROP INDEX IF EXISTS __SCHEMA__.entries_token;
-- Dead letters, oldest first.
CREATE INDEX IF NOT EXISTS entries_dead ON __SCHEMA__.entries (queue, died_at, seq)
    WHERE run_at IS NULL;
-- Leased entries by lease end: a page of them (`page`) without stepping
-- over the pending ones.
CREATE INDEX IF NOT EXISTS entries_leased ON __SCHEMA__.entries (queue, run_at, seq)
    WHERE token IS NOT NULL;

-- Tokens of claims their handle gave up on ('G'), for an hour: such a claim
-- still on its way leases nothing when it lands.
CREATE TABLE IF NOT EXISTS __SCHEMA__.given_up (
    token text COLLATE "C" PRIMARY KEY,
    at    bigint NOT NULL
);

-- Each queue's own state: paused since `paused_at` (ms), or running
-- (NULL, or no row).
CREATE TABLE IF NOT EXISTS __SCHEMA__.queues (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_at bigint
);

-- Key limits: '<concurrency>,<rate max>,<rate per ms>' (each empty for no
-- bound); key '*' is the default for keys without a row of their own.
CREATE TABLE IF NOT EXISTS __SCHEMA__.key_limits (
    queue text COLLATE "C" NOT NULL,
    key   text COLLATE "C" NOT NULL,
    lim   text NOT NULL,
    PRIMARY KEY (queue, key)
);

-- When the recent deliveries of a key with a rate began (ms, ascending):
-- at most its rate's `max`, none older than its `per` when written.
-- Written by claims only, each holding the key's advisory lock.
CREATE TABLE IF NOT EXISTS __SCHEMA__.key_starts (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    starts bigint[] NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Ids kept taken after their entry finished, until `until` (ms): an insert
-- of the id is refused while `until` is after now. Closed windows are
-- deleted lazily (by the next insert of the id, and by each new window).
CREATE TABLE IF NOT EXISTS __SCHEMA__.uniques (
    queue text COLLATE "C" NOT NULL,
    id    text COLLATE "C" NOT NULL,
    until bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX IF NOT EXISTS uniques_until ON __SCHEMA__.uniques (queue, until);

CREATE TABLE IF NOT EXISTS __SCHEMA__.schedules (
    queue text COLLATE "C" NOT NULL,
    name  text COLLATE "C" NOT NULL,
    rec   text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (queue, name)
);
-- VERSION 8: a schedule paused one by one (its pending tick parked, see
-- PARKED).
ALTER TABLE __SCHEMA__.schedules
    ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;

-- VERSION 8: a schedule's last run (when its last finished tick was
-- claimed) and how that ended ('d' done, 'x' dead, 'c' cancelled). Apart
-- from `schedules`: a finish writes it while it holds the tick's row, and
-- schedule(), unschedule and pause_schedule lock the schedule's row before
-- the tick's, so a finish that waited for the schedule's row could
-- deadlock with them; no one locks a row of this table but a finish of
-- the schedule's one tick, and the removal of the schedule after it.
CREATE TABLE IF NOT EXISTS __SCHEMA__.schedule_runs (
    queue text COLLATE "C" NOT NULL,
    name  text COLLATE "C" NOT NULL,
    last_run bigint,
    last_outcome text NOT NULL,
    PRIMARY KEY (queue, name)
);

-- VERSION 8: the inserting span's trace context ('<traceparent>[
-- <tracestate>]'), an entry's last failed attempts (a JSON array of
-- [attempt, at ms, reason], oldest first, at most 10), and a dead tick's
-- schedule (on its '<name>@<instant>' copy).
ALTER TABLE __SCHEMA__.entries
    ADD COLUMN IF NOT EXISTS trace text,
    ADD COLUMN IF NOT EXISTS errors jsonb,
    ADD COLUMN IF NOT EXISTS schedule text;

-- What became of finished entries (acked 'd', dead 'x', cancelled 'c'),
-- written by the statement of the finish, kept until `until` (the finishing
-- handle's keep_results on): rows past it are not read, and the writes of
-- results delete a few of them each.
CREATE TABLE IF NOT EXISTS __SCHEMA__.results (
    queue    text COLLATE "C" NOT NULL,
    id       text COLLATE "C" NOT NULL,
    state    text NOT NULL,
    at       bigint NOT NULL,
    attempts integer NOT NULL,
    output   text,
    reason   text,
    until    bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX IF NOT EXISTS results_until ON __SCHEMA__.results (queue, until);

-- Ids that a `wait` looks for, until `until`: a finish of one of them
-- notifies its id ('f<id>') on the queue's channel. A finish looks here
-- with one index probe; no one waiting, it notifies nothing.
CREATE TABLE IF NOT EXISTS __SCHEMA__.waits (
    queue text COLLATE "C" NOT NULL,
    id    text COLLATE "C" NOT NULL,
    until bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
-- Whether a wait is under way on the queue: one probe past the lapsed.
CREATE INDEX IF NOT EXISTS waits_until ON __SCHEMA__.waits (queue, until);

-- Leases revoked by `cancel`: the holder's next extension of (id, token)
-- says Cancelled rather than Lost, until `until` (its lease end then, and
-- a lease on).
CREATE TABLE IF NOT EXISTS __SCHEMA__.cancels (
    queue text COLLATE "C" NOT NULL,
    id    text COLLATE "C" NOT NULL,
    token text COLLATE "C" NOT NULL,
    until bigint NOT NULL,
    PRIMARY KEY (queue, id)
);

-- Live workers: the record each refreshes with its heartbeats (JSON, see
-- durable/health.rs), when it was first and last heard of; gone once
-- `expires` (three refresh periods after `last`) passed, or once it shut
-- down (`gone`: kept a minute, so that a heartbeat still on its way when
-- it left does not bring it back).
CREATE TABLE IF NOT EXISTS __SCHEMA__.workers (
    queue   text COLLATE "C" NOT NULL,
    id      text COLLATE "C" NOT NULL,
    record  text NOT NULL,
    first   bigint NOT NULL,
    last    bigint NOT NULL,
    expires bigint NOT NULL,
    gone    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (queue, id)
);

-- What happened per minute (`at`, ms): counts written by the statements of
-- the inserts and finishes themselves, one upsert per statement, in a row
-- of the writer's backend (`shard`: its pid), so that no transaction ever
-- waits for another's row (a caller's open transaction that inserted holds
-- its row until it ends). Kept 24 hours (each new row deletes a few older
-- ones).
CREATE TABLE IF NOT EXISTS __SCHEMA__.minutes (
    queue    text COLLATE "C" NOT NULL,
    at       bigint NOT NULL,
    shard    integer NOT NULL,
    inserted bigint NOT NULL DEFAULT 0,
    done     bigint NOT NULL DEFAULT 0,
    failed   bigint NOT NULL DEFAULT 0,
    dead     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, at, shard)
);

-- The database's clock, in ms.
CREATE OR REPLACE FUNCTION __SCHEMA__.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- When the queue's head is due (a lease end while leased), or NULL: the
-- first plain entry and the first special one, one index probe each.
-- (PL/pgSQL rather than SQL: its plan is cached per session; a SQL
-- function with ORDER BY is not inlined and would plan on every call.)
CREATE OR REPLACE FUNCTION __SCHEMA__.head(p_queue text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN least(
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at IS NOT NULL AND e.key IS NULL AND e.priority = 0
         ORDER BY e.run_at, e.seq LIMIT 1),
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at IS NOT NULL
           AND (e.key IS NOT NULL OR e.priority <> 0)
         ORDER BY e.run_at, e.seq LIMIT 1));
END $$;

-- When the queue's first entry after `p_now` is due (a lease end while
-- leased), or NULL.
CREATE OR REPLACE FUNCTION __SCHEMA__.next_after(p_queue text, p_now bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN least(
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at > p_now AND e.key IS NULL AND e.priority = 0
         ORDER BY e.run_at, e.seq LIMIT 1),
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at > p_now AND (e.key IS NOT NULL OR e.priority <> 0)
         ORDER BY e.run_at, e.seq LIMIT 1));
END $$;

-- The limit key `p_key` runs under, as key_limits keeps it: its own, else
-- the default's ('*'), else NULL (no limit).
CREATE OR REPLACE FUNCTION __SCHEMA__.limit_of(p_queue text, p_key text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce(
        (SELECT l.lim FROM __SCHEMA__.key_limits l WHERE l.queue = p_queue AND l.key = p_key),
        (SELECT l.lim FROM __SCHEMA__.key_limits l WHERE l.queue = p_queue AND l.key = '*'));
END $$;

-- Keeps the ids `p_ids` taken for `p_ms[i]` ms from `p_now` (an id whose
-- `p_ms` is NULL has no window), replacing an earlier window of the id;
-- forgets the queue's closed windows on the way (those another transaction
-- holds locked are left for the next time: this never waits on them).
CREATE OR REPLACE FUNCTION __SCHEMA__.keep_taken(p_queue text, p_ids text[], p_ms bigint[],
    p_now bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM __SCHEMA__.uniques u WHERE u.ctid IN (
        SELECT c.ctid FROM __SCHEMA__.uniques c
        WHERE c.queue = p_queue AND c.until <= p_now FOR UPDATE SKIP LOCKED);
    INSERT INTO __SCHEMA__.uniques AS u (queue, id, until)
    SELECT p_queue, x.id, p_now + x.ms FROM unnest(p_ids, p_ms) AS x(id, ms)
    WHERE x.ms IS NOT NULL
    ON CONFLICT (queue, id) DO UPDATE SET until = excluded.until;
END $$;

-- Whether id `p_id` is kept taken at `p_now`; a closed window of it is
-- forgotten.
CREATE OR REPLACE FUNCTION __SCHEMA__.unique_open(p_queue text, p_id text, p_now bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_until bigint;
BEGIN
    SELECT u.until INTO v_until FROM __SCHEMA__.uniques u WHERE u.queue = p_queue AND u.id = p_id;
    IF v_until IS NULL THEN
        RETURN false;
    END IF;
    IF v_until > p_now THEN
        RETURN true;
    END IF;
    DELETE FROM __SCHEMA__.uniques u
    WHERE u.queue = p_queue AND u.id = p_id AND u.until <= p_now;
    RETURN false;
END $$;

-- Places of keys freed: for each key `p_keys[i]`, `p_counts[i]` of its
-- entries that held one (leased, lease not run out) finished (acked,
-- retried, dead, given back, removed); the entry `p_except` is not one that
-- waits. Tells waiting consumers to look again when such a key has a
-- concurrency, was at it before (so a claim may have left its entries
-- waiting) and has entries that no lease holds. (Entries of a key below its
-- concurrency were never held up by it; an entry held up by a rate waits
-- for a time the claim reported.) A queue without key limits reads no
-- more than that. Counts under no lock: a finish beside this one still
-- looks held, which can only announce once more. (Planned once per
-- session, generic: planning its statement anew at each call cost a
-- finish more than running it.)
CREATE OR REPLACE FUNCTION __SCHEMA__.freed(p_queue text, p_channel text, p_keys text[],
    p_counts integer[], p_except text, p_now bigint) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM pg_notify(p_channel, p_now::text) FROM (
        SELECT 1 FROM unnest(p_keys, p_counts) AS f(key, n)
        CROSS JOIN LATERAL (
            SELECT nullif(split_part(coalesce(
                (SELECT l.lim FROM __SCHEMA__.key_limits l
                 WHERE l.queue = p_queue AND l.key = f.key),
                (SELECT l.lim FROM __SCHEMA__.key_limits l
                 WHERE l.queue = p_queue AND l.key = '*')), ',', 1), '')::bigint AS most) AS m
        WHERE EXISTS (SELECT 1 FROM __SCHEMA__.key_limits l WHERE l.queue = p_queue)
          AND m.most IS NOT NULL
          -- Held now below the concurrency, and at it with those freed.
          AND (SELECT count(*) FROM __SCHEMA__.entries d
               WHERE d.queue = p_queue AND d.key = f.key AND d.token IS NOT NULL
                 AND d.run_at > p_now) BETWEEN m.most - f.n AND m.most - 1
          AND EXISTS (SELECT 1 FROM __SCHEMA__.entries d
                      WHERE d.queue = p_queue AND d.key = f.key AND d.run_at IS NOT NULL
                        AND (d.token IS NULL OR d.run_at <= p_now)
                        AND d.id <> coalesce(p_except, ''))
        LIMIT 1) AS x;
END $$;

-- Tells waiting consumers (LISTEN on `p_channel`) that an entry is due at
-- `p_at`, if that is before the old head: only a new head can wake one
-- earlier. Sent at commit. The old head a write passes is the first entry
-- not yet due when it runs (`next_after(queue, now)`), not head(): a due
-- head may be leased by a claim running beside the write, which cannot see
-- the write and tells its consumer to sleep until the first entry not yet
-- due; an entry due before that one must be announced even though a due
-- head comes before it. (Consumers that find entries due ask again at
-- once, so the announcement only costs a notification while they do.)
CREATE OR REPLACE FUNCTION __SCHEMA__.announce(p_channel text, p_at bigint, p_old_head bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_old_head IS NULL OR p_at < p_old_head THEN
        PERFORM pg_notify(p_channel, p_at::text);
    END IF;
END $$;

-- PARKED: the `run_at` of a paused schedule's pending tick (its instant
-- stays in `tick`): after every real time, so no claim reaches it and
-- every read of due entries steps over it.
CREATE OR REPLACE FUNCTION __SCHEMA__.parked() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT 9000000000000000000::bigint $$;

-- The keep_results (ms) of the handle whose statement runs: the setting
-- `punctual.keep` that claim(), finish() and cancel() set for their
-- transaction (unset: 0, nothing is kept).
CREATE OR REPLACE FUNCTION __SCHEMA__.keep_ms() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('punctual.keep', true), '')::bigint, 0)
$$;

-- Deletes a few of the queue's results past their `until` (never waiting
-- for a row another transaction holds).
CREATE OR REPLACE FUNCTION __SCHEMA__.expire_results(p_queue text, p_now bigint)
RETURNS void LANGUAGE sql AS $$
    DELETE FROM __SCHEMA__.results r
    USING (SELECT x.id FROM __SCHEMA__.results x
           WHERE x.queue = p_queue AND x.until <= p_now
           ORDER BY x.until LIMIT 16 FOR UPDATE SKIP LOCKED) AS old
    WHERE r.queue = p_queue AND r.id = old.id;
$$;

-- Keeps entry `p_id`'s result (see results) for keep_ms(); nothing when
-- that is 0.
CREATE OR REPLACE FUNCTION __SCHEMA__.keep_result(p_queue text, p_id text, p_state text,
    p_now bigint, p_attempts integer, p_output text, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_keep bigint := __SCHEMA__.keep_ms();
BEGIN
    IF v_keep <= 0 THEN
        RETURN;
    END IF;
    INSERT INTO __SCHEMA__.results AS r (queue, id, state, at, attempts, output, reason, until)
    VALUES (p_queue, p_id, p_state, p_now, p_attempts, nullif(p_output, ''),
        nullif(p_reason, ''), p_now + v_keep)
    ON CONFLICT (queue, id) DO UPDATE SET state = excluded.state, at = excluded.at,
        attempts = excluded.attempts, output = excluded.output, reason = excluded.reason,
        until = excluded.until;
    PERFORM __SCHEMA__.expire_results(p_queue, p_now);
END $$;

-- Notifies 'f<id>' for each of `p_ids` that a wait looks for: one index
-- probe, and nothing more, while no one waits on the queue.
CREATE OR REPLACE FUNCTION __SCHEMA__.push_finished(p_queue text, p_channel text, p_ids text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM __SCHEMA__.waits w
               WHERE w.queue = p_queue AND w.until > __SCHEMA__.now_ms()) THEN
        PERFORM pg_notify(p_channel, 'f' || w.id) FROM __SCHEMA__.waits w
        WHERE w.queue = p_queue AND w.id = ANY (p_ids);
    END IF;
END $$;

-- Counts events of `p_now`'s minute (see minutes): one upsert; a new row
-- deletes a few rows older than a day.
CREATE OR REPLACE FUNCTION __SCHEMA__.tally(p_queue text, p_now bigint, p_inserted bigint,
    p_done bigint, p_failed bigint, p_dead bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_at bigint := p_now - p_now % 60000;
    v_new boolean;
BEGIN
    IF p_inserted = 0 AND p_done = 0 AND p_failed = 0 AND p_dead = 0 THEN
        RETURN;
    END IF;
    INSERT INTO __SCHEMA__.minutes AS m (queue, at, shard, inserted, done, failed, dead)
    VALUES (p_queue, v_at, pg_backend_pid(), p_inserted, p_done, p_failed, p_dead)
    ON CONFLICT (queue, at, shard) DO UPDATE SET inserted = m.inserted + excluded.inserted,
        done = m.done + excluded.done, failed = m.failed + excluded.failed,
        dead = m.dead + excluded.dead
    RETURNING m.xmax = 0 INTO v_new;
    IF v_new THEN
        DELETE FROM __SCHEMA__.minutes m
        USING (SELECT o.at, o.shard FROM __SCHEMA__.minutes o
               WHERE o.queue = p_queue AND o.at < v_at - 86400000
               ORDER BY o.at LIMIT 64 FOR UPDATE SKIP LOCKED) AS old
        WHERE m.queue = p_queue AND m.at = old.at AND m.shard = old.shard;
    END IF;
END $$;

-- INSERT: a new pending entry due at `p_ms` (`p_absolute`) or `p_ms` from
-- now. `p_id` NULL: an id '#<seq>' is made. Returns the entry's id, or NULL
-- if `p_id` is taken (pending, leased or dead, or kept taken by a unique
-- window; nothing changes then).
-- (The hottest call of a producer: the clock, the old head (see announce)
-- and announce() are inline, and it returns a scalar, so it is called in a
-- SELECT list.)
-- The unique window is looked for after the row went in: an ack or remove
-- of the id that runs beside this insert either still holds the old row,
-- which this insert then waits for (the conflict), or committed its window
-- before this look.
CREATE OR REPLACE FUNCTION __SCHEMA__.insert_row(p_queue text, p_channel text, p_id text,
    p_value text, p_absolute boolean, p_ms bigint, p_trace text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_at bigint := CASE WHEN p_absolute THEN p_ms ELSE v_now + p_ms END;
    v_old_head bigint;
    v_seq bigint;
    v_id text;
BEGIN
    v_old_head := least(
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at > v_now AND e.key IS NULL AND e.priority = 0
         ORDER BY e.run_at, e.seq LIMIT 1),
        (SELECT e.run_at FROM __SCHEMA__.entries e
         WHERE e.queue = p_queue AND e.run_at > v_now AND (e.key IS NOT NULL OR e.priority <> 0)
         ORDER BY e.run_at, e.seq LIMIT 1));
    LOOP
        v_seq := nextval('__SCHEMA__.seq');
        v_id := coalesce(p_id, '#' || v_seq);
        INSERT INTO __SCHEMA__.entries AS e (queue, id, seq, run_at, value, trace)
        VALUES (p_queue, v_id, v_seq, v_at, p_value, p_trace)
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
        -- A made id taken by a caller's own id: make another.
        IF p_id IS NOT NULL THEN
            RETURN NULL;
        END IF;
    END LOOP;
    IF p_id IS NOT NULL AND __SCHEMA__.unique_open(p_queue, p_id, v_now) THEN
        DELETE FROM __SCHEMA__.entries e WHERE e.queue = p_queue AND e.id = p_id;
        RETURN NULL;
    END IF;
    IF v_old_head IS NULL OR v_at < v_old_head THEN
        PERFORM pg_notify(p_channel, v_at::text);
    END IF;
    RETURN v_id;
END $$;

-- INSERT: insert_row (above: `p_trace`, the inserting span's trace
-- context, or NULL), counted in the minute's history.
CREATE OR REPLACE FUNCTION __SCHEMA__.insert(p_queue text, p_channel text, p_id text,
    p_value text, p_absolute boolean, p_ms bigint, p_trace text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id text := __SCHEMA__.insert_row(p_queue, p_channel, p_id, p_value, p_absolute, p_ms,
        p_trace);
BEGIN
    IF v_id IS NOT NULL THEN
        PERFORM __SCHEMA__.tally(p_queue, __SCHEMA__.now_ms(), 1, 0, 0, 0);
    END IF;
    RETURN v_id;
END $$;

-- INSERT_BATCH: insert_row for each row of the arrays, in order, counted
-- once in the history. Each id, or NULL where the caller's id was taken.
CREATE OR REPLACE FUNCTION __SCHEMA__.insert_batch(p_queue text, p_channel text, p_ids text[],
    p_values text[], p_absolute boolean[], p_ms bigint[], p_traces text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
BEGIN
    v_ids := ARRAY(SELECT __SCHEMA__.insert_row(p_queue, p_channel, x.id, x.value, x.absolute,
                       x.ms, x.trace)
                   FROM unnest(p_ids, p_values, p_absolute, p_ms, p_traces)
                       WITH ORDINALITY AS x(id, value, absolute, ms, trace, o)
                   ORDER BY x.o);
    PERFORM __SCHEMA__.tally(p_queue, __SCHEMA__.now_ms(),
        (SELECT count(*) FROM unnest(v_ids) AS i WHERE i IS NOT NULL), 0, 0, 0);
    RETURN v_ids;
END $$;

-- INSERT_PLANS: the entries `insert_with` and `insert_many_with` describe,
-- as parallel arrays, one per entry: id (NULL: made, '#<seq>'), value, due
-- at `p_ms` (`p_absolute`) or `p_ms` from now, priority, key, own
-- max_attempts, unique window (ms), replace. All or none, in one call;
-- each entry's id, or NULL where it was refused: its id is taken by an
-- entry (pending without replace, leased, dead, a schedule's tick) or kept
-- taken by a unique window. With replace, a pending entry of the id (not
-- leased, not dead, not a tick) takes the new value, due time (ordered as a
-- new insert), priority, key and options, its attempts reset and its last
-- error cleared. The entries are taken in their order, so one whose id an
-- earlier one took is refused, or replaces it. Sequence numbers follow the
-- order of the arrays (FIFO among equal due times).
-- Made ids go in with one statement (linear: the arrays are read with
-- unnest, never subscripted inside a statement); ids of the caller's one
-- at a time, each as `insert` does it (the unique window looked for after
-- the row went in). A replace waits for a claim that holds the row locked
-- and then sees the lease: a leased entry is never replaced.
CREATE OR REPLACE FUNCTION __SCHEMA__.insert_plans(p_queue text, p_channel text, p_ids text[],
    p_values text[], p_absolute boolean[], p_ms bigint[], p_priorities smallint[],
    p_keys text[], p_max_attempts integer[], p_unique_ms bigint[], p_replace boolean[],
    p_traces text[] DEFAULT NULL)
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_old_head bigint := __SCHEMA__.next_after(p_queue, v_now);
    v_n integer := coalesce(cardinality(p_values), 0);
    v_seqs bigint[];
    v_ids text[];
    v_missed bigint;
    v_first bigint;
    v_at bigint;
    v_seq bigint;
    r record;
BEGIN
    IF v_n = 0 THEN
        RETURN '{}';
    END IF;
    v_seqs := ARRAY(SELECT nextval('__SCHEMA__.seq') FROM generate_series(1, v_n));
    WITH x AS MATERIALIZED (
        SELECT * FROM unnest(p_ids, p_values, p_absolute, p_ms, p_priorities, p_keys,
            p_max_attempts, v_seqs, p_traces) WITH ORDINALITY
            AS x(id, value, absolute, ms, priority, key, max_attempts, seq, trace, o)
    ), inserted AS (
        INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, priority, key, max_attempts,
            trace)
        SELECT p_queue, '#' || x.seq, x.seq,
            CASE WHEN x.absolute THEN x.ms ELSE v_now + x.ms END, x.value, x.priority, x.key,
            x.max_attempts, x.trace
        FROM x WHERE x.id IS NULL
        ON CONFLICT DO NOTHING
        RETURNING seq, run_at
    )
    SELECT array_agg(CASE WHEN x.id IS NULL AND i.seq IS NOT NULL THEN '#' || x.seq END
                     ORDER BY x.o),
           min(i.run_at), count(*) FILTER (WHERE x.id IS NULL AND i.seq IS NULL)
    INTO v_ids, v_first, v_missed
    FROM x LEFT JOIN inserted i ON i.seq = x.seq;
    IF v_missed > 0 THEN
        -- Made ids a caller took with its own: new ids, the same places.
        FOR r IN SELECT x.* FROM unnest(p_ids, v_ids, p_values, p_absolute, p_ms, p_priorities,
                     p_keys, p_max_attempts, v_seqs, p_traces) WITH ORDINALITY
                     AS x(id, made, value, absolute, ms, priority, key, max_attempts, seq, trace,
                          o)
                 WHERE x.id IS NULL AND x.made IS NULL LOOP
            v_at := CASE WHEN r.absolute THEN r.ms ELSE v_now + r.ms END;
            LOOP
                v_seq := nextval('__SCHEMA__.seq');
                INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, priority, key,
                    max_attempts, trace)
                VALUES (p_queue, '#' || v_seq, r.seq, v_at, r.value, r.priority, r.key,
                    r.max_attempts, r.trace)
                ON CONFLICT DO NOTHING;
                EXIT WHEN FOUND;
            END LOOP;
            v_ids[r.o::integer] := '#' || v_seq;
            v_first := least(v_first, v_at);
        END LOOP;
    END IF;
    FOR r IN SELECT x.* FROM unnest(p_ids, p_values, p_absolute, p_ms, p_priorities, p_keys,
                 p_max_attempts, p_unique_ms, p_replace, v_seqs, p_traces) WITH ORDINALITY
                 AS x(id, value, absolute, ms, priority, key, max_attempts, unique_ms, replace,
                      seq, trace, o)
             WHERE x.id IS NOT NULL ORDER BY x.o LOOP
        v_at := CASE WHEN r.absolute THEN r.ms ELSE v_now + r.ms END;
        INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, priority, key,
            max_attempts, unique_ms, trace)
        VALUES (p_queue, r.id, r.seq, v_at, r.value, r.priority, r.key, r.max_attempts,
            r.unique_ms, r.trace)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            IF __SCHEMA__.unique_open(p_queue, r.id, v_now) THEN
                DELETE FROM __SCHEMA__.entries e WHERE e.queue = p_queue AND e.id = r.id;
                CONTINUE;
            END IF;
        ELSIF r.replace THEN
            UPDATE __SCHEMA__.entries e SET value = r.value, run_at = v_at, seq = r.seq,
                priority = r.priority, key = r.key, max_attempts = r.max_attempts,
                unique_ms = r.unique_ms, attempt = 0, deadline = NULL, reason = NULL,
                errors = NULL, trace = r.trace
            WHERE e.queue = p_queue AND e.id = r.id AND e.run_at IS NOT NULL
              AND e.token IS NULL AND e.tick IS NULL;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
        ELSE
            CONTINUE;
        END IF;
        v_ids[r.o::integer] := r.id;
        v_first := least(v_first, v_at);
    END LOOP;
    IF v_first IS NOT NULL THEN
        PERFORM __SCHEMA__.announce(p_channel, v_first, v_old_head);
    END IF;
    PERFORM __SCHEMA__.tally(p_queue, v_now,
        (SELECT count(*) FROM unnest(v_ids) AS i WHERE i IS NOT NULL), 0, 0, 0);
    RETURN v_ids;
END $$;

-- INSERT_MANY: new pending entries, `p_ms[i]` from now, ids '#<seq>' in
-- order; all or none. A made id a caller has taken with its own id is
-- skipped, as `insert` does. (Linear in the batch: the arrays are read
-- with unnest, never subscripted inside a statement, where each subscript
-- of a text[] walks the array from its start.)
CREATE OR REPLACE FUNCTION __SCHEMA__.insert_many(p_queue text, p_channel text,
    p_values text[], p_ms bigint[], p_trace text DEFAULT NULL) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_old_head bigint := __SCHEMA__.next_after(p_queue, v_now);
    v_n integer := coalesce(array_length(p_values, 1), 0);
    v_ids text[];
    v_seqs bigint[];
    v_inserted integer;
    v_seq bigint;
    v_first bigint;
    r record;
BEGIN
    IF v_n = 0 THEN
        RETURN '{}';
    END IF;
    -- One sequence number per entry, increasing with its place; the ids of
    -- those whose made id was free, NULL where a caller's id took it.
    WITH numbered AS MATERIALIZED (
        SELECT u.o, u.value, u.ms, nextval('__SCHEMA__.seq') AS seq
        FROM (SELECT x.value, x.ms, x.o
              FROM unnest(p_values, p_ms) WITH ORDINALITY AS x(value, ms, o)
              ORDER BY x.o) AS u
    ), inserted AS (
        INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, trace)
        SELECT p_queue, '#' || n.seq, n.seq, v_now + n.ms, n.value, p_trace FROM numbered n
        ON CONFLICT DO NOTHING
        RETURNING seq
    )
    SELECT array_agg(CASE WHEN i.seq IS NULL THEN NULL ELSE '#' || n.seq END ORDER BY n.o),
           array_agg(n.seq ORDER BY n.o), count(i.seq)
    INTO v_ids, v_seqs, v_inserted
    FROM numbered n LEFT JOIN inserted i ON i.seq = n.seq;
    IF v_inserted < v_n THEN
        FOR r IN SELECT x.o, x.seq, x.value, x.ms
                 FROM unnest(v_ids, v_seqs, p_values, p_ms) WITH ORDINALITY
                     AS x(id, seq, value, ms, o)
                 WHERE x.id IS NULL LOOP
            -- A new id, the same place in the batch's order (its seq).
            LOOP
                v_seq := nextval('__SCHEMA__.seq');
                INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, trace)
                VALUES (p_queue, '#' || v_seq, r.seq, v_now + r.ms, r.value, p_trace)
                ON CONFLICT DO NOTHING;
                EXIT WHEN FOUND;
            END LOOP;
            v_ids[r.o::integer] := '#' || v_seq;
        END LOOP;
    END IF;
    SELECT min(v_now + m) INTO v_first FROM unnest(p_ms) AS m;
    PERFORM __SCHEMA__.announce(p_channel, v_first, v_old_head);
    PERFORM __SCHEMA__.tally(p_queue, v_now, v_n, 0, 0, 0);
    RETURN v_ids;
END $$;

-- REMOVE: deletes an entry, pending, leased or dead; a schedule's tick takes
-- its schedule with it. `p_tick_only`: only a schedule's tick (and the
-- schedule, even if it has no tick now). Whether it was there. An entry
-- with a unique window keeps its id taken for that window from now; one
-- that held a place of its key frees it (see freed).
CREATE OR REPLACE FUNCTION __SCHEMA__.remove(p_queue text, p_channel text, p_id text,
    p_tick_only boolean) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint;
    v_tick boolean;
    v_found boolean;
    v_key text;
    v_held boolean;
    v_unique bigint;
BEGIN
    IF p_tick_only THEN
        DELETE FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_id;
        v_found := FOUND;
        DELETE FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.id = p_id AND e.tick IS NOT NULL;
        -- An ack that holds the tick turns it into its successor in place:
        -- this waits for it, then deletes the successor (and then the last
        -- run it recorded).
        v_found := v_found OR FOUND;
        DELETE FROM __SCHEMA__.schedule_runs r WHERE r.queue = p_queue AND r.name = p_id;
        RETURN v_found;
    END IF;
    -- A schedule's row before its tick, in the order schedule() and
    -- unschedule lock them: a remove racing either never deadlocks.
    PERFORM 1 FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_id FOR UPDATE;
    v_now := __SCHEMA__.now_ms();
    DELETE FROM __SCHEMA__.entries e WHERE e.queue = p_queue AND e.id = p_id
    RETURNING e.tick IS NOT NULL, e.key, e.token IS NOT NULL AND e.run_at > v_now, e.unique_ms
    INTO v_tick, v_key, v_held, v_unique;
    IF v_tick IS NULL THEN
        RETURN false;
    END IF;
    IF v_tick THEN
        DELETE FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_id;
        DELETE FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.id = p_id AND e.tick IS NOT NULL;
        DELETE FROM __SCHEMA__.schedule_runs r WHERE r.queue = p_queue AND r.name = p_id;
    END IF;
    IF v_unique IS NOT NULL THEN
        PERFORM __SCHEMA__.keep_taken(p_queue, ARRAY[p_id], ARRAY[v_unique], v_now);
    END IF;
    IF v_held AND v_key IS NOT NULL THEN
        PERFORM __SCHEMA__.freed(p_queue, p_channel, ARRAY[v_key], ARRAY[1], NULL, v_now);
    END IF;
    PERFORM __SCHEMA__.push_finished(p_queue, p_channel, ARRAY[p_id]);
    RETURN true;
END $$;

-- RESET: moves a pending entry to `p_ms` from now, ordered as if inserted
-- now (a tick moves its instant with it). `p_tick_only` (run now): only
-- the pending tick of a schedule. Whether it moved.
CREATE OR REPLACE FUNCTION __SCHEMA__.reset(p_queue text, p_channel text, p_id text, p_ms bigint,
    p_tick_only boolean) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_at bigint := __SCHEMA__.now_ms() + p_ms;
    v_old_head bigint := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
BEGIN
    UPDATE __SCHEMA__.entries e SET run_at = v_at, seq = nextval('__SCHEMA__.seq'),
        tick = CASE WHEN e.tick IS NOT NULL THEN v_at END
    WHERE e.queue = p_queue AND e.id = p_id AND e.run_at IS NOT NULL AND e.token IS NULL
      AND (NOT p_tick_only OR (e.tick IS NOT NULL AND EXISTS (
          SELECT 1 FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_id)));
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM __SCHEMA__.announce(p_channel, v_at, v_old_head);
    RETURN true;
END $$;

-- REQUEUE_DEAD: a dead letter back as pending, `p_ms` from now, attempts
-- reset. Whether it was dead.
CREATE OR REPLACE FUNCTION __SCHEMA__.requeue_dead(p_queue text, p_channel text, p_id text,
    p_ms bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_at bigint := __SCHEMA__.now_ms() + p_ms;
    v_old_head bigint := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
BEGIN
    UPDATE __SCHEMA__.entries e SET run_at = v_at, seq = nextval('__SCHEMA__.seq'),
        attempt = 0, deadline = NULL, reason = NULL, died_at = NULL, errors = NULL
    WHERE e.queue = p_queue AND e.id = p_id AND e.run_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Its next finish is the one to wait for.
    DELETE FROM __SCHEMA__.results r WHERE r.queue = p_queue AND r.id = p_id;
    PERFORM __SCHEMA__.announce(p_channel, v_at, v_old_head);
    RETURN true;
END $$;

-- The instant of the tick after the one at `p_instant`, run from `p_since`
-- (its claim), by the database's clock `p_now`, for schedule record `p_rec`.
-- Cron instants come from the client, which parses the expression (the
-- database's clock still decides which one is next): `p_cands` is
-- '<rec>\n<from>,<c1>,<c2>,...[,x]', the first instants of the expression
-- strictly after `from`, ending in 'x' when there are no more.
-- `state`: 'n' next is the instant; 'x' the expression has none left; 'c'
-- the candidates do not cover it: the client sends those after `next`.
CREATE OR REPLACE FUNCTION __SCHEMA__.next_tick(p_rec text, p_instant bigint, p_since bigint,
    p_now bigint, p_cands text, OUT state text, OUT next bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_parts text[];
    v_period bigint;
    v_policy text;
    v_ref bigint;
    v_list text[];
    v_nl integer;
BEGIN
    state := 'n';
    IF left(p_rec, 2) = 'e,' THEN
        v_parts := string_to_array(p_rec, ',');
        v_period := v_parts[2]::bigint;
        v_policy := v_parts[3];
        next := p_instant + v_period;
        IF v_policy <> 'delay' THEN
            -- Burst and skip stay on the epoch grid (a changed spec leaves
            -- the running tick on the old grid).
            next := (floor(p_instant::numeric / v_period)::bigint + 1) * v_period;
        END IF;
        IF next > p_now OR v_policy = 'burst' THEN
            RETURN;
        END IF;
        IF v_policy = 'skip' THEN
            next := (floor(p_now::numeric / v_period)::bigint + 1) * v_period;
            RETURN;
        END IF;
        next := coalesce(p_since, p_now) + v_period; -- delay: the grid moves
        RETURN;
    END IF;
    v_ref := greatest(p_now, p_instant);
    v_nl := coalesce(strpos(p_cands, E'\n'), 0);
    IF v_nl = 0 OR left(p_cands, v_nl - 1) <> p_rec THEN
        state := 'c'; next := v_ref; RETURN;
    END IF;
    v_list := string_to_array(substr(p_cands, v_nl + 1), ',');
    IF v_list[1] !~ '^[0-9]+$' OR v_list[1]::bigint > v_ref THEN
        state := 'c'; next := v_ref; RETURN;
    END IF;
    FOR i IN 2 .. coalesce(array_length(v_list, 1), 0) LOOP
        IF v_list[i] = 'x' THEN
            state := 'x'; next := NULL; RETURN;
        END IF;
        IF v_list[i]::bigint > v_ref THEN
            next := v_list[i]::bigint; RETURN;
        END IF;
    END LOOP;
    state := 'c'; next := v_ref;
END $$;

-- Waits for a sending of the claim `p_token` that runs now (a claim holds
-- this lock shared), then records the token in `given_up` (trimmed to the
-- last hour): a first sending of it that lands later leases nothing.
CREATE OR REPLACE FUNCTION __SCHEMA__.give_up(p_token text, p_now bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('__SCHEMA__ claim'), hashtext(p_token));
    DELETE FROM __SCHEMA__.given_up g WHERE g.at < p_now - 3600000;
    INSERT INTO __SCHEMA__.given_up (token, at) VALUES (p_token, p_now)
    ON CONFLICT DO NOTHING;
END $$;

-- Makes the entry `p_name` the tick of its schedule due at `p_at`: a fresh
-- entry (attempt 0) with the schedule's value, in place of the tick that
-- leaves (updated in place, so a statement waiting on that row's lock, an
-- upsert or an unschedule, finds the successor); or deletes it when `p_at`
-- is NULL (no instant left) or the schedule is gone. Returns false, having
-- changed nothing, if the name is held by an entry that is not a tick.
CREATE OR REPLACE FUNCTION __SCHEMA__.place_tick(p_queue text, p_channel text, p_name text,
    p_at bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_old_head bigint := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
BEGIN
    IF p_at IS NOT NULL THEN
        -- A paused schedule's tick is parked (see parked()).
        INSERT INTO __SCHEMA__.entries AS e (queue, id, seq, run_at, value, tick)
        SELECT p_queue, p_name, nextval('__SCHEMA__.seq'),
            CASE WHEN s.paused THEN __SCHEMA__.parked() ELSE p_at END, s.value, p_at
        FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_name
        ON CONFLICT (queue, id) DO UPDATE SET seq = excluded.seq, run_at = excluded.run_at,
            value = excluded.value, attempt = 0, token = NULL, since = NULL, deadline = NULL,
            tick = excluded.tick, reason = NULL, died_at = NULL, errors = NULL, trace = NULL
        WHERE e.tick IS NOT NULL;
        IF FOUND THEN
            PERFORM __SCHEMA__.announce(p_channel, p_at, v_old_head);
            PERFORM __SCHEMA__.tally(p_queue, __SCHEMA__.now_ms(), 1, 0, 0, 0);
            RETURN true;
        END IF;
    END IF;
    DELETE FROM __SCHEMA__.entries d
    WHERE d.queue = p_queue AND d.id = p_name AND d.tick IS NOT NULL;
    -- An entry of the name that is not a tick (a caller's own, committed
    -- while this waited for it) is left alone.
    RETURN NOT EXISTS (SELECT 1 FROM __SCHEMA__.entries d
                       WHERE d.queue = p_queue AND d.id = p_name);
END $$;

-- Deletes the queue's dead letters past the calling handle's retention,
-- which claim() and finish() set for their transaction as the setting
-- `punctual.dead`, '<max age ms>,<max count>' (-1: no limit; unset or
-- empty: none): those that died before `p_now` - age, then the oldest
-- beyond the count. A dead letter with a unique window keeps its id taken
-- for that window from `p_now`.
CREATE OR REPLACE FUNCTION __SCHEMA__.trim_dead(p_queue text, p_now bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_rules text := coalesce(current_setting('punctual.dead', true), '');
    v_age bigint;
    v_count bigint;
    v_last record;
    v_ids text[];
    v_ms bigint[];
BEGIN
    IF v_rules = '' THEN
        RETURN;
    END IF;
    v_age := split_part(v_rules, ',', 1)::bigint;
    v_count := split_part(v_rules, ',', 2)::bigint;
    IF v_age >= 0 THEN
        WITH gone AS (
            DELETE FROM __SCHEMA__.entries d
            WHERE d.queue = p_queue AND d.run_at IS NULL AND d.died_at < p_now - v_age
            RETURNING d.id, d.unique_ms
        )
        SELECT array_agg(g.id), array_agg(g.unique_ms) INTO v_ids, v_ms
        FROM gone g WHERE g.unique_ms IS NOT NULL;
        IF v_ids IS NOT NULL THEN
            PERFORM __SCHEMA__.keep_taken(p_queue, v_ids, v_ms, p_now);
        END IF;
    END IF;
    IF v_count >= 0 THEN
        -- The newest of those to go: the (count + 1)-th newest.
        SELECT d.died_at, d.seq INTO v_last FROM __SCHEMA__.entries d
        WHERE d.queue = p_queue AND d.run_at IS NULL
        ORDER BY d.died_at DESC, d.seq DESC OFFSET v_count LIMIT 1;
        IF FOUND THEN
            WITH gone AS (
                DELETE FROM __SCHEMA__.entries d
                WHERE d.queue = p_queue AND d.run_at IS NULL
                  AND (d.died_at, d.seq) <= (v_last.died_at, v_last.seq)
                RETURNING d.id, d.unique_ms
            )
            SELECT array_agg(g.id), array_agg(g.unique_ms) INTO v_ids, v_ms
            FROM gone g WHERE g.unique_ms IS NOT NULL;
            IF v_ids IS NOT NULL THEN
                PERFORM __SCHEMA__.keep_taken(p_queue, v_ids, v_ms, p_now);
            END IF;
        END IF;
    END IF;
END $$;

-- Records the last run of schedule `p_name` (its tick claimed at
-- `p_since`, the one before kept when NULL; ended `p_outcome`) in
-- `schedule_runs`, never waiting for the schedule's row (see there). A
-- schedule removed meanwhile: its removal deletes the record after the
-- tick's row, so after this.
CREATE OR REPLACE FUNCTION __SCHEMA__.last_run(p_queue text, p_name text, p_since bigint,
    p_outcome text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO __SCHEMA__.schedule_runs AS r (queue, name, last_run, last_outcome)
    SELECT p_queue, p_name, p_since, p_outcome
    WHERE EXISTS (SELECT 1 FROM __SCHEMA__.schedules s
                  WHERE s.queue = p_queue AND s.name = p_name)
    ON CONFLICT (queue, name) DO UPDATE
    SET last_run = coalesce(excluded.last_run, r.last_run), last_outcome = excluded.last_outcome;
$$;

-- Moves entry `e` to the dead letters with `p_reason`. A tick is copied to
-- '<name>@<instant>' (its name stays for its successor: the caller places
-- it with place_tick); a name over 480 bytes is cut to 480 (at a character
-- boundary), so that the dead letter's id keeps to the 512 bytes of an id.
CREATE OR REPLACE FUNCTION __SCHEMA__.bury(p_queue text, p_channel text, e __SCHEMA__.entries, p_reason text,
    p_now bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_dead text := e.id;
    v_name text := left(e.id, 480);
    v_n integer := 1;
BEGIN
    PERFORM __SCHEMA__.tally(p_queue, p_now, 0, 0, 0, 1);
    IF e.tick IS NULL THEN
        UPDATE __SCHEMA__.entries d SET run_at = NULL, token = NULL, since = NULL,
            attempt = e.attempt, reason = p_reason, died_at = p_now, errors = e.errors
        WHERE d.queue = p_queue AND d.id = e.id;
        PERFORM __SCHEMA__.keep_result(p_queue, e.id, 'x', p_now, e.attempt, NULL, p_reason);
        PERFORM __SCHEMA__.push_finished(p_queue, p_channel,
            ARRAY[e.id]);
        PERFORM __SCHEMA__.trim_dead(p_queue, p_now);
        RETURN;
    END IF;
    PERFORM __SCHEMA__.last_run(p_queue, e.id, e.since, 'x');
    WHILE octet_length(convert_to(v_name, 'UTF8')) > 480 LOOP
        v_name := left(v_name, -1);
    END LOOP;
    v_dead := v_name || '@' || e.tick;
    WHILE EXISTS (SELECT 1 FROM __SCHEMA__.entries d WHERE d.queue = p_queue AND d.id = v_dead) LOOP
        v_n := v_n + 1;
        v_dead := v_name || '@' || e.tick || '.' || v_n;
    END LOOP;
    INSERT INTO __SCHEMA__.entries (queue, id, seq, run_at, value, attempt, deadline, reason, died_at,
        errors, schedule)
    VALUES (p_queue, v_dead, e.seq, NULL, e.value, e.attempt, e.deadline, p_reason, p_now,
        e.errors, e.id);
    PERFORM __SCHEMA__.keep_result(p_queue, v_dead, 'x', p_now, e.attempt, NULL, p_reason);
    PERFORM __SCHEMA__.push_finished(p_queue, p_channel,
        ARRAY[e.id, v_dead]);
    PERFORM __SCHEMA__.trim_dead(p_queue, p_now);
END $$;

-- Finishes the delivery (`p_id`, `p_token`). `p_kind`: 'a' ack; 'r' retry,
-- due `p_ms` from now, attempts kept; 'f' fail: a retry as 'r', or to the
-- dead letters with `p_reason` once the attempt reached `p_limit` (0:
-- never); 'b' bury: to the dead letters with `p_reason`, that delivery not
-- counted; 's' snooze: as 'r', that delivery not counted; 'x' discard: to
-- the dead letters with `p_reason`, that delivery counted; 'g' give back,
-- due at once in its old place (`p_ms` 1: the
-- attempt counts, 0: it does not); 'G' gives back, uncounted, every
-- delivery of the claim `p_token`, whose leases end at `p_ms` or later
-- (and by `p_now` + `p_lease`, give or take a second of clock steps). A tick that leaves its schedule (ack,
-- dead) gets its successor; `p_cands` are the cron instants for it.
-- `result`: 1 applied (2: and a failure went to the dead letters), 0 the
-- lease was lost (nothing changed), -1 the successor needs the cron
-- instants of `rec` after `cron_from` (nothing changed). An entry's own
-- max_attempts replaces `p_limit`. An acked entry with a unique window
-- keeps its id taken for that window; a finish of a lease that had not run
-- out frees a place of the entry's key (see freed).
CREATE OR REPLACE FUNCTION __SCHEMA__.finish_one(p_queue text, p_channel text, p_limit integer,
    p_lease bigint, p_now bigint, p_kind text, p_id text, p_token text, p_ms bigint,
    p_reason text, p_cands text, OUT result integer, OUT cron_from bigint, OUT rec text)
LANGUAGE plpgsql AS $$
DECLARE
    e __SCHEMA__.entries;
    v_kind text := p_kind;
    v_old_head bigint;
    v_state text;
    v_next bigint;
BEGIN
    result := 1;
    IF v_kind = 'G' THEN
        -- Waits for the claim if it runs now (it holds this lock shared),
        -- then marks its token: if it is still on its way (on another
        -- connection), it leases nothing when it lands.
        PERFORM __SCHEMA__.give_up(p_token, p_now);
        -- The clock read after the wait: the claim may have leased since
        -- `p_now` was read.
        FOR e IN SELECT * FROM __SCHEMA__.entries d
                 WHERE d.queue = p_queue AND d.run_at >= p_ms
                   AND d.run_at <= __SCHEMA__.now_ms() + p_lease + 1000 AND d.token = p_token
                 FOR UPDATE LOOP
            PERFORM __SCHEMA__.finish_one(p_queue, p_channel, p_limit, p_lease, p_now, 'g',
                e.id, p_token, 0, '', '');
        END LOOP;
        RETURN;
    END IF;
    SELECT * INTO e FROM __SCHEMA__.entries d
    WHERE d.queue = p_queue AND d.id = p_id AND d.token = p_token FOR UPDATE;
    IF NOT FOUND THEN
        result := 0;
        RETURN;
    END IF;
    IF v_kind IN ('f', 'x') THEN
        -- A failed attempt is kept with the entry (the last 10).
        e.errors := coalesce(e.errors, '[]'::jsonb)
            || jsonb_build_array(jsonb_build_array(e.attempt, p_now, p_reason));
        IF jsonb_array_length(e.errors) > 10 THEN
            e.errors := e.errors - 0;
        END IF;
    END IF;
    IF v_kind = 'f' THEN
        IF coalesce(e.max_attempts, p_limit) > 0
           AND e.attempt >= coalesce(e.max_attempts, p_limit) THEN
            v_kind := 'd'; result := 2;
        ELSE
            v_kind := 'r';
        END IF;
    ELSIF v_kind = 'b' THEN
        e.attempt := greatest(e.attempt - 1, 0);
        v_kind := 'd';
    ELSIF v_kind = 's' THEN
        e.attempt := greatest(e.attempt - 1, 0);
        v_kind := 'r';
    ELSIF v_kind = 'x' THEN
        v_kind := 'd'; result := 2;
    END IF;
    IF v_kind = 'r' OR v_kind = 'g' THEN
        v_old_head := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
        IF v_kind = 'r' THEN
            v_next := p_now + p_ms;
            -- A failed attempt's reason stays with the entry until it is
            -- acked.
            UPDATE __SCHEMA__.entries d SET run_at = v_next, seq = nextval('__SCHEMA__.seq'),
                token = NULL, since = NULL, attempt = e.attempt,
                reason = CASE WHEN p_reason <> '' THEN p_reason ELSE e.reason END,
                errors = e.errors
            WHERE d.queue = p_queue AND d.id = p_id;
        ELSE
            v_next := least(coalesce(e.deadline, p_now), p_now);
            UPDATE __SCHEMA__.entries d SET run_at = v_next, token = NULL, since = NULL,
                attempt = CASE WHEN p_ms = 0 THEN greatest(e.attempt - 1, 0) ELSE e.attempt END
            WHERE d.queue = p_queue AND d.id = p_id;
        END IF;
        PERFORM __SCHEMA__.announce(p_channel, v_next, v_old_head);
        IF e.key IS NOT NULL AND e.run_at > p_now THEN
            PERFORM __SCHEMA__.freed(p_queue, p_channel, ARRAY[e.key], ARRAY[1], p_id, p_now);
        END IF;
        RETURN;
    END IF;
    -- 'a' or 'd': the entry leaves the schedule.
    v_next := NULL;
    IF e.tick IS NOT NULL THEN
        SELECT s.rec INTO rec FROM __SCHEMA__.schedules s
        WHERE s.queue = p_queue AND s.name = p_id;
        IF rec IS NOT NULL THEN
            SELECT t.state, t.next INTO v_state, v_next
            FROM __SCHEMA__.next_tick(rec, e.tick, e.since, p_now, p_cands) t;
            IF v_state = 'c' THEN
                result := -1; cron_from := v_next;
                RETURN;
            END IF;
        END IF;
    END IF;
    IF v_kind = 'd' THEN
        PERFORM __SCHEMA__.bury(p_queue, p_channel, e, p_reason, p_now);
    ELSE
        -- An ack: `p_reason` carries its output (JSON, or '').
        PERFORM __SCHEMA__.keep_result(p_queue, p_id, 'd', p_now, e.attempt, p_reason, NULL);
        IF e.tick IS NOT NULL THEN
            PERFORM __SCHEMA__.last_run(p_queue, p_id, e.since, 'd');
        END IF;
        PERFORM __SCHEMA__.push_finished(p_queue, p_channel, ARRAY[p_id]);
    END IF;
    IF e.tick IS NOT NULL THEN
        PERFORM __SCHEMA__.place_tick(p_queue, p_channel, p_id, v_next);
    ELSIF v_kind <> 'd' THEN
        DELETE FROM __SCHEMA__.entries d WHERE d.queue = p_queue AND d.id = p_id;
        IF e.unique_ms IS NOT NULL THEN
            PERFORM __SCHEMA__.keep_taken(p_queue, ARRAY[p_id], ARRAY[e.unique_ms], p_now);
        END IF;
    END IF;
    IF e.key IS NOT NULL AND e.run_at > p_now THEN
        PERFORM __SCHEMA__.freed(p_queue, p_channel, ARRAY[e.key], ARRAY[1], p_id, p_now);
    END IF;
    rec := NULL;
END $$;

-- Applies the ops given as parallel arrays (see finish_one), plain acks (a
-- worker's usual op) in one statement. One result per op, in order.
CREATE OR REPLACE FUNCTION __SCHEMA__.finish_all(p_queue text, p_channel text, p_limit integer,
    p_lease bigint, p_now bigint, p_kinds text[], p_ids text[], p_tokens text[], p_ms bigint[],
    p_reasons text[], p_cands text[], OUT results integer[], OUT cron_from bigint[],
    OUT recs text[]) LANGUAGE plpgsql SET plan_cache_mode = auto AS $$
DECLARE
    v_n integer := coalesce(array_length(p_kinds, 1), 0);
    v_acked bigint[];
    v_unique_ids text[];
    v_unique_ms bigint[];
    v_keys text[];
    v_one record;
    v_keep bigint := coalesce(nullif(current_setting('punctual.keep', true), '')::bigint, 0);
    v_acked_ids text[];
BEGIN
    results := array_fill(NULL::integer, ARRAY[v_n]);
    cron_from := array_fill(NULL::bigint, ARRAY[v_n]);
    recs := array_fill(NULL::text, ARRAY[v_n]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- Locks the rows in id order first: a heartbeat's extend does the
    -- same, so the two never deadlock.
    PERFORM 1 FROM __SCHEMA__.entries d
    WHERE d.queue = p_queue AND d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE;
    -- Plain acks: entries that are not ticks, deleted together (then the
    -- unique windows of those that have one, and the places of keys they
    -- held: see freed).
    IF v_keep > 0 THEN
        -- (An ack's output, JSON or '', comes in its `p_reasons`; its result
        -- is kept in the same statement.)
        WITH acked AS (
            DELETE FROM __SCHEMA__.entries d
            USING unnest(p_kinds, p_ids, p_tokens, p_reasons) WITH ORDINALITY
                AS o(kind, id, token, output, ord)
            WHERE o.kind = 'a' AND d.queue = p_queue AND d.id = o.id AND d.token = o.token
              AND d.tick IS NULL
            RETURNING o.ord, d.id, d.unique_ms,
                CASE WHEN d.run_at > p_now THEN d.key END AS key, d.attempt, o.output
        ), kept AS (
            INSERT INTO __SCHEMA__.results AS r (queue, id, state, at, attempts, output, until)
            SELECT p_queue, a.id, 'd', p_now, a.attempt, nullif(a.output, ''), p_now + v_keep
            FROM acked a
            ON CONFLICT (queue, id) DO UPDATE SET state = excluded.state, at = excluded.at,
                attempts = excluded.attempts, output = excluded.output, reason = NULL,
                until = excluded.until
        )
        SELECT coalesce(array_agg(a.ord), '{}'),
               array_agg(a.id) FILTER (WHERE a.unique_ms IS NOT NULL),
               array_agg(a.unique_ms) FILTER (WHERE a.unique_ms IS NOT NULL),
               array_agg(a.key) FILTER (WHERE a.key IS NOT NULL), array_agg(a.id)
        INTO v_acked, v_unique_ids, v_unique_ms, v_keys, v_acked_ids FROM acked a;
        IF cardinality(v_acked) > 0 THEN
            PERFORM __SCHEMA__.expire_results(p_queue, p_now);
        END IF;
    ELSE
        -- Results not kept: the delete as it was before they existed.
        WITH acked AS (
            DELETE FROM __SCHEMA__.entries d
            USING unnest(p_kinds, p_ids, p_tokens) WITH ORDINALITY AS o(kind, id, token, ord)
            WHERE o.kind = 'a' AND d.queue = p_queue AND d.id = o.id AND d.token = o.token
              AND d.tick IS NULL
            RETURNING o.ord, d.id, d.unique_ms,
                CASE WHEN d.run_at > p_now THEN d.key END AS key
        )
        SELECT coalesce(array_agg(a.ord), '{}'),
               array_agg(a.id) FILTER (WHERE a.unique_ms IS NOT NULL),
               array_agg(a.unique_ms) FILTER (WHERE a.unique_ms IS NOT NULL),
               array_agg(a.key) FILTER (WHERE a.key IS NOT NULL), array_agg(a.id)
        INTO v_acked, v_unique_ids, v_unique_ms, v_keys, v_acked_ids FROM acked a;
    END IF;
    -- Waiters are told of the ids they look for (one probe: none, mostly).
    IF cardinality(v_acked) > 0
       AND EXISTS (SELECT 1 FROM __SCHEMA__.waits w
                   WHERE w.queue = p_queue AND w.until > p_now) THEN
        PERFORM __SCHEMA__.push_finished(p_queue, p_channel, v_acked_ids);
    END IF;
    IF v_unique_ids IS NOT NULL THEN
        PERFORM __SCHEMA__.keep_taken(p_queue, v_unique_ids, v_unique_ms, p_now);
    END IF;
    -- (Only a key's concurrency limit makes a freed place worth telling.
    -- Two IFs: a condition with a subquery runs as a statement, a plain
    -- one as a simple expression, so a plain finish pays nothing.)
    IF v_keys IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM __SCHEMA__.key_limits l WHERE l.queue = p_queue) THEN
            PERFORM __SCHEMA__.freed(p_queue, p_channel, array_agg(k.key),
                array_agg(k.n::integer), NULL, p_now)
            FROM (SELECT x AS key, count(*) AS n FROM unnest(v_keys) AS x GROUP BY x) AS k;
        END IF;
    END IF;
    IF cardinality(v_acked) = v_n THEN
        results := array_fill(1, ARRAY[v_n]);
        PERFORM __SCHEMA__.tally(p_queue, p_now, 0, v_n, 0, 0);
        RETURN;
    END IF;
    FOR i IN 1 .. v_n LOOP
        IF p_kinds[i] = 'a' AND i = ANY (v_acked) THEN
            results[i] := 1;
        ELSE
            SELECT * INTO v_one FROM __SCHEMA__.finish_one(p_queue, p_channel, p_limit, p_lease,
                p_now, p_kinds[i], p_ids[i], p_tokens[i], p_ms[i], p_reasons[i], p_cands[i]) f;
            results[i] := v_one.result;
            cron_from[i] := v_one.cron_from;
            recs[i] := v_one.rec;
        END IF;
    END LOOP;
    PERFORM __SCHEMA__.tally(p_queue, p_now, 0,
        (SELECT count(*) FROM unnest(p_kinds, results) AS x(kind, result)
         WHERE x.kind = 'a' AND x.result = 1),
        (SELECT count(*) FROM unnest(p_kinds, results) AS x(kind, result)
         WHERE x.kind IN ('f', 'x') AND x.result IN (1, 2)), 0);
END $$;

-- FINISH: applies ops (see finish_all) without claiming.
-- `p_keep`: how long the results of what finishes are kept (ms; 0: none).
CREATE OR REPLACE FUNCTION __SCHEMA__.finish(p_queue text, p_channel text, p_limit integer,
    p_lease bigint, p_kinds text[], p_ids text[], p_tokens text[], p_ms bigint[], p_reasons text[],
    p_cands text[], p_dead text, p_keep bigint DEFAULT 0, OUT now bigint, OUT results integer[],
    OUT cron_from bigint[], OUT recs text[]) LANGUAGE plpgsql AS $$
BEGIN
    now := __SCHEMA__.now_ms();
    IF p_dead <> '' THEN
        PERFORM set_config('punctual.dead', p_dead, true);
    END IF;
    IF p_keep > 0 THEN
        PERFORM set_config('punctual.keep', p_keep::text, true);
    END IF;
    SELECT f.results, f.cron_from, f.recs INTO results, cron_from, recs
    FROM __SCHEMA__.finish_all(p_queue, p_channel, p_limit, p_lease, now, p_kinds, p_ids,
        p_tokens, p_ms, p_reasons, p_cands) f;
END $$;

-- CLAIM_FAIR: the step of claim() when special entries are due (see
-- claim): leases up to `p_max` due entries at `p_now`, in this order.
--
-- The highest priority level with due entries first, a level at a time
-- (level 0 holds the plain entries too). Within a level, rounds: round 1
-- takes the first due entry of each key (an entry without a key is a key
-- of its own) in (due time, seq) order; each later round takes the next
-- due entry of each key that gave one in the round before, in (due time,
-- seq) order of those entries. A key its limit refuses is skipped for the
-- rest of the claim: it never holds up the others.
--
-- Without scanning a backlog: the claim reads a *window*, the first due
-- entries of the level (entries_level, and entries_plain at level 0):
-- p_max + 8 of them, or 2 * p_max + 16 when keys have limits (some may be
-- refused). When the window holds every due entry of the level, the
-- claim order is the window's, by (round, due time, seq), a round being an
-- entry's rank among its key's entries. When it does not, only its first
-- entry of each key is known to be in order (a key whose first due entry
-- lies beyond the window comes before any key's second); if those do not
-- fill the claim, it looks beyond the window a round at a time: the keys
-- of the queue by a loose index scan of entries_keys (one probe per key,
-- never per entry), each key's first due entry at the level and the keyless
-- entries after the window, then for each later round one probe per key
-- that gave. So one key's 10,000 due entries cost a claim a window and a
-- probe, not 10,000 rows.
--
-- Admission: a key's own limit, else the default's ('*'); a keyless entry
-- is never limited, nor a key without a limit (a queue without any limit
-- reads none). A limited key is admitted while (its entries leased now,
-- lease not run out) + (taken by this claim) < concurrency, and (its
-- deliveries begun within (now - per, now]) + (taken) < rate max; a bound
-- of 0 holds the key's entries. A key is counted once without a lock (one
-- already full is skipped without one), then locked with
-- pg_try_advisory_xact_lock(hashtext('<schema> key'), hashtext(queue ||
-- '/' || key)), held to the commit, and counted again in a later statement:
-- every claim that takes entries of the key holds that lock, and each
-- statement reads a fresh snapshot, so the second count sees every lease
-- of the key that an earlier claim committed, and no claim beside this one
-- leases an entry of the key before this one commits (it fails to take the
-- lock and skips the key: claims never wait on each other). Finishes
-- (acks, retries) of other transactions only lower the counts, so a count
-- read before they commit errs on the safe side. A lease extended after it
-- ran out holds its place again, as on the other stores. Starts of keys
-- with a rate are recorded in key_starts at the end, under the same locks.
-- A claim locks only the keys it would take entries of next: at most
-- p_max of them.
--
-- Set-based where it can be: the window's candidates are chosen in claim
-- order in memory, the keys they need counted and locked in one statement
-- each, their rows locked in one statement (FOR UPDATE SKIP LOCKED: a row
-- another transaction holds is left, and the next candidates are chosen in
-- its place) and leased in one. Beyond a truncated window, a candidate at a
-- time (one statement or two each).
--
-- `head`: now when it took p_max (more may be due); else the earliest of
-- the first entry not yet due (due times and lease ends) and the time the
-- rate window of each key it refused for its rate opens. `locked`: a row
-- or a key was skipped, held by another transaction, which may end without
-- a notification. (Its statements are planned once per session, generic:
-- their parameters never change what plan is best, and planning each call
-- anew cost a fair claim more than running it.)
CREATE OR REPLACE FUNCTION __SCHEMA__.claim_fair(p_queue text, p_max integer, p_lease bigint,
    p_limit integer, p_token text, p_channel text, p_now bigint,
    OUT head bigint, OUT more boolean, OUT locked boolean,
    OUT ids text[], OUT vals text[], OUT attempts integer[], OUT deadlines bigint[],
    OUT lease_ends bigint[], OUT schedule_recs text[], OUT whys text[],
    OUT keys text[], OUT priorities smallint[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_lease_end bigint := p_now + p_lease;
    v_window integer := 2 * p_max + 16;
    v_taken integer := 0;
    v_full boolean := false;
    v_bytes bigint := 0;
    v_max_bytes constant bigint := 16 * 1024 * 1024;
    v_limits boolean;
    v_all_limits boolean;
    v_lim_keys text[];
    v_lim_texts text[];
    v_plain boolean;
    v_top smallint;
    v_top_due boolean;
    v_due boolean;
    v_valid boolean;
    v_prev integer := 32768;
    v_bound integer;
    v_level smallint;
    v_p smallint;
    -- The keys met by this claim, as parallel arrays: name; state ('u'
    -- unlimited, 'c' to count, 'a' admitted: its lock held, 'r' refused,
    -- 'l' skipped: another claim holds its lock); concurrency, rate max
    -- and per (NULL: none); leased and begun when counted under the lock;
    -- taken and started by this claim; chosen in the choice under way.
    k_names text[] := '{}';
    k_state text[] := '{}';
    k_most bigint[] := '{}';
    k_rate bigint[] := '{}';
    k_per bigint[] := '{}';
    k_held bigint[] := '{}';
    k_begun bigint[] := '{}';
    k_taken integer[] := '{}';
    k_started integer[] := '{}';
    k_chosen integer[] := '{}';
    -- The candidates, in claim order, and which of them are out (taken,
    -- or held by another transaction).
    c_ids text[];
    c_keys text[];
    c_runs bigint[];
    c_seqs bigint[];
    c_out boolean[];
    c_lims text[];
    c_bytes bigint[];
    c_bury boolean[];
    v_chosen_bytes bigint;
    v_capped boolean := false;
    v_lbytes bigint;
    v_n integer;
    l_vals text[];
    l_keys text[];
    l_prios smallint[];
    l_seqs bigint[];
    l_os bigint[];
    -- What a choice picked (indexes into c_*), and the keys it must count.
    v_pick integer[];
    v_count text[];
    v_locked text[];
    -- The keys that gave an entry in the round under way, with that entry.
    g_keys text[];
    g_runs bigint[];
    g_seqs bigint[];
    v_phase integer;
    v_truncated boolean;
    v_end_run bigint;
    v_end_seq bigint;
    v_need integer;
    v_i integer;
    v_key text;
    v_lim text;
    v_held bigint;
    v_begun bigint;
    v_skipped boolean := false;
    v_attempts integer;
    v_rec text;
    v_state text;
    v_next bigint;
    v_open bigint;
    v_got integer;
    v_c integer;
    l_ids text[];
    l_attempts integer[];
    l_deadlines bigint[];
    e __SCHEMA__.entries;
    r record;
BEGIN
    more := false;
    locked := false;
    ids := '{}'; vals := '{}'; attempts := '{}'; deadlines := '{}'; lease_ends := '{}';
    schedule_recs := '{}'; whys := '{}'; keys := '{}'; priorities := '{}';
    -- The queue's limits, all of them when there are few (else each key's
    -- is read with the window), and whether plain entries are due.
    -- And the highest level of special entries, and whether it has due
    -- ones: one statement for what most claims need before the window.
    SELECT lim.n > 0, lim.n <= 256, lim.keys, lim.lims,
           coalesce((SELECT d.run_at FROM __SCHEMA__.entries d
                     WHERE d.queue = p_queue AND d.run_at IS NOT NULL AND d.key IS NULL
                       AND d.priority = 0
                     ORDER BY d.run_at, d.seq LIMIT 1) <= p_now, false),
           top.p,
           coalesce((SELECT d.run_at FROM __SCHEMA__.entries d
                     WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                       AND (d.key IS NOT NULL OR d.priority <> 0) AND d.priority = top.p
                     ORDER BY d.run_at, d.seq LIMIT 1) <= p_now, false)
    INTO v_limits, v_all_limits, v_lim_keys, v_lim_texts, v_plain, v_top, v_top_due
    FROM (SELECT count(*) AS n, array_agg(l.key) AS keys, array_agg(l.lim) AS lims
          FROM (SELECT l.key, l.lim FROM __SCHEMA__.key_limits l
                WHERE l.queue = p_queue LIMIT 257) AS l) AS lim,
         (SELECT (SELECT d.priority FROM __SCHEMA__.entries d
                  WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                    AND (d.key IS NOT NULL OR d.priority <> 0)
                  ORDER BY d.priority DESC LIMIT 1) AS p) AS top;
    IF NOT v_all_limits THEN
        v_lim_keys := NULL;
        v_lim_texts := NULL;
    END IF;
    <<levels>>
    LOOP
        EXIT WHEN v_taken >= p_max OR v_full;
        -- The next level with due entries: a loose scan of entries_level.
        v_level := NULL;
        v_bound := v_prev;
        LOOP
            IF v_bound = 32768 THEN
                -- The highest, read above.
                v_p := v_top;
                v_due := v_top_due;
            ELSE
                v_p := (SELECT d.priority FROM __SCHEMA__.entries d
                        WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                          AND (d.key IS NOT NULL OR d.priority <> 0) AND d.priority < v_bound
                        ORDER BY d.priority DESC LIMIT 1);
                EXIT WHEN v_p IS NULL;
                v_due := coalesce((SELECT d.run_at FROM __SCHEMA__.entries d
                                   WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                                     AND (d.key IS NOT NULL OR d.priority <> 0)
                                     AND d.priority = v_p
                                   ORDER BY d.run_at, d.seq LIMIT 1) <= p_now, false);
            END IF;
            EXIT WHEN v_p IS NULL;
            IF v_due THEN
                v_level := v_p;
                EXIT;
            END IF;
            v_bound := v_p;
        END LOOP;
        IF v_plain AND v_prev > 0 AND coalesce(v_level, -1) < 0 THEN
            v_level := 0;
        END IF;
        EXIT WHEN v_level IS NULL;
        v_prev := v_level;
        -- (Where no key is limited, no key is refused either: a window a
        -- little larger than the claim has enough keys for it.)
        v_window := CASE WHEN v_limits THEN 2 * p_max + 16 ELSE p_max + 8 END;
        -- The window, and its candidates in claim order: all of them when
        -- it holds every due entry of the level, else its first entry of
        -- each key; with what the choice needs to know of each (the limit
        -- of a key the claim has not met yet, the value's size, whether it
        -- is past its deliveries).
        -- (The aggregates read the candidates in claim order from the
        -- sorted subquery, as PostgreSQL feeds them: one sort, not one per
        -- array.)
        SELECT bool_or(f.total > v_window),
               max(f.run_at) FILTER (WHERE f.o = v_window),
               max(f.seq) FILTER (WHERE f.o = v_window),
               array_agg(f.id) FILTER (WHERE f.pick),
               array_agg(f.key) FILTER (WHERE f.pick),
               array_agg(f.bytes) FILTER (WHERE f.pick),
               array_agg(f.bury) FILTER (WHERE f.pick),
               array_agg(CASE WHEN v_limits AND NOT v_all_limits AND f.key IS NOT NULL
                              AND f.rnd = 1 AND f.key <> ALL (k_names)
                         THEN coalesce((SELECT l.lim FROM __SCHEMA__.key_limits l
                                        WHERE l.queue = p_queue AND l.key = f.key),
                                       (SELECT l.lim FROM __SCHEMA__.key_limits l
                                        WHERE l.queue = p_queue AND l.key = '*'), '') END)
                   FILTER (WHERE f.pick)
        INTO v_truncated, v_end_run, v_end_seq, c_ids, c_keys, c_bytes, c_bury, c_lims
        FROM (SELECT z.*, z.o <= v_window AND (z.total <= v_window OR z.rnd = 1) AS pick
              FROM (SELECT x.*, count(*) OVER () AS total,
                        row_number() OVER (ORDER BY x.run_at, x.seq) AS o,
                        CASE WHEN x.key IS NULL THEN 1
                            ELSE row_number() OVER (PARTITION BY x.key ORDER BY x.run_at, x.seq)
                        END AS rnd
                    FROM ((SELECT d.id, d.key, d.run_at, d.seq, octet_length(d.value) AS bytes,
                               coalesce(d.max_attempts, p_limit) > 0
                               AND d.attempt >= coalesce(d.max_attempts, p_limit) AS bury
                           FROM __SCHEMA__.entries d
                           WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                             AND (d.key IS NOT NULL OR d.priority <> 0) AND d.priority = v_level
                             AND d.run_at <= p_now
                           ORDER BY d.run_at, d.seq LIMIT v_window + 1)
                          UNION ALL
                          (SELECT d.id, d.key, d.run_at, d.seq, octet_length(d.value),
                               (coalesce(d.max_attempts, p_limit) > 0
                                AND d.attempt >= coalesce(d.max_attempts, p_limit))
                               OR d.tick IS NOT NULL
                           FROM __SCHEMA__.entries d
                           WHERE v_level = 0 AND d.queue = p_queue AND d.run_at IS NOT NULL
                             AND d.key IS NULL AND d.priority = 0 AND d.run_at <= p_now
                           ORDER BY d.run_at, d.seq LIMIT v_window + 1)
                          ORDER BY run_at, seq LIMIT v_window + 1) AS x) AS z
              ORDER BY z.rnd, z.o) AS f;
        v_truncated := coalesce(v_truncated, false);
        c_out := array_fill(false, ARRAY[coalesce(cardinality(c_ids), 0)]);
        g_keys := '{}'; g_runs := '{}'; g_seqs := '{}';
        -- Choose in memory, count and lock the keys the choice needs, lock
        -- and lease its rows; again while rows another transaction holds
        -- leave places.
        LOOP
            EXIT levels WHEN v_taken >= p_max OR v_full;
            -- The choice: candidates in order, each key within what it
            -- admits, the values within 16 MiB (at least one entry); a key
            -- not yet counted is chosen on trust, and counted before
            -- anything is leased.
            v_pick := '{}';
            v_count := '{}';
            v_chosen_bytes := 0;
            v_capped := false;
            IF v_limits THEN
                k_chosen := array_fill(0, ARRAY[cardinality(k_names)]);
            END IF;
            -- (Keys the window names and a choice never reaches are never
            -- looked up.)
            FOR v_c IN 1 .. coalesce(cardinality(c_ids), 0) LOOP
                EXIT WHEN v_taken + cardinality(v_pick) >= p_max;
                CONTINUE WHEN c_out[v_c];
                v_key := c_keys[v_c];
                IF v_key IS NOT NULL AND v_limits THEN
                    v_i := array_position(k_names, v_key);
                    IF v_i IS NULL THEN
                        -- A key met for the first time: its limit.
                        v_lim := CASE WHEN v_all_limits
                            THEN coalesce(v_lim_texts[array_position(v_lim_keys, v_key)],
                                          v_lim_texts[array_position(v_lim_keys, '*')], '')
                            ELSE c_lims[v_c] END;
                        k_names := k_names || v_key;
                        v_i := cardinality(k_names);
                        k_most := k_most || nullif(split_part(v_lim, ',', 1), '')::bigint;
                        k_rate := k_rate || nullif(split_part(v_lim, ',', 2), '')::bigint;
                        k_per := k_per || nullif(split_part(v_lim, ',', 3), '')::bigint;
                        IF k_rate[v_i] IS NULL OR k_per[v_i] IS NULL THEN
                            k_rate[v_i] := NULL;
                            k_per[v_i] := NULL;
                        END IF;
                        k_held := k_held || 0::bigint;
                        k_begun := k_begun || 0::bigint;
                        k_taken := k_taken || 0;
                        k_started := k_started || 0;
                        k_chosen := k_chosen || 0;
                        k_state := k_state || CASE WHEN k_most[v_i] IS NULL
                            AND k_rate[v_i] IS NULL THEN 'u' ELSE 'c' END;
                    END IF;
                    CONTINUE WHEN k_state[v_i] IN ('r', 'l');
                    IF k_state[v_i] = 'c' THEN
                        IF k_chosen[v_i] = 0 THEN
                            v_count := v_count || v_key;
                        END IF;
                    ELSIF k_state[v_i] = 'a' THEN
                        IF k_held[v_i] + k_taken[v_i] >= coalesce(k_most[v_i], 9223372036854775807)
                           OR k_begun[v_i] + k_taken[v_i]
                              >= coalesce(k_rate[v_i], 9223372036854775807) THEN
                            -- Refused for the rest of the claim.
                            k_state[v_i] := 'r';
                            CONTINUE;
                        END IF;
                        CONTINUE WHEN k_held[v_i] + k_taken[v_i] + k_chosen[v_i]
                                      >= coalesce(k_most[v_i], 9223372036854775807)
                                   OR k_begun[v_i] + k_taken[v_i] + k_chosen[v_i]
                                      >= coalesce(k_rate[v_i], 9223372036854775807);
                    END IF;
                END IF;
                IF NOT c_bury[v_c] THEN
                    IF cardinality(ids) + cardinality(v_pick) > 0
                       AND v_bytes + v_chosen_bytes + c_bytes[v_c] > v_max_bytes THEN
                        v_capped := true;
                        EXIT;
                    END IF;
                    v_chosen_bytes := v_chosen_bytes + c_bytes[v_c];
                END IF;
                IF v_key IS NOT NULL AND v_limits THEN
                    k_chosen[v_i] := k_chosen[v_i] + 1;
                END IF;
                v_pick := v_pick || v_c;
            END LOOP;
            IF cardinality(v_count) > 0 THEN
                -- Counted without their locks: those already full are
                -- refused without one; the others are locked...
                SELECT coalesce(array_agg(x.key) FILTER (WHERE x.got), '{}'),
                       coalesce(array_agg(x.key) FILTER (WHERE x.got IS NULL), '{}')
                INTO v_locked, v_count
                FROM (SELECT c.key, CASE
                        WHEN k_most[c.i] IS NOT NULL
                         AND (SELECT count(*) FROM __SCHEMA__.entries d
                              WHERE d.queue = p_queue AND d.key = c.key AND d.token IS NOT NULL
                                AND d.run_at > p_now) >= k_most[c.i]
                        THEN NULL
                        WHEN k_rate[c.i] IS NOT NULL
                         AND coalesce((SELECT (SELECT count(*) FROM unnest(s.starts) AS x
                                               WHERE x > p_now - k_per[c.i])
                                       FROM __SCHEMA__.key_starts s
                                       WHERE s.queue = p_queue AND s.key = c.key), 0)
                             >= k_rate[c.i]
                        THEN NULL
                        ELSE pg_try_advisory_xact_lock(hashtext('__SCHEMA__ key'),
                                                       hashtext(p_queue || '/' || c.key))
                        END AS got
                      FROM (SELECT k AS key, array_position(k_names, k) AS i
                            FROM unnest(v_count) AS k) AS c) AS x;
                FOREACH v_key IN ARRAY v_count LOOP
                    k_state[array_position(k_names, v_key)] := 'r';
                END LOOP;
                -- ... and counted again, under their locks.
                FOR r IN SELECT c.key, c.i,
                             CASE WHEN k_most[c.i] IS NULL THEN 0 ELSE
                             (SELECT count(*) FROM __SCHEMA__.entries d
                              WHERE d.queue = p_queue AND d.key = c.key AND d.token IS NOT NULL
                                AND d.run_at > p_now) END AS held,
                             CASE WHEN k_rate[c.i] IS NULL THEN 0 ELSE
                             coalesce((SELECT (SELECT count(*) FROM unnest(s.starts) AS x
                                               WHERE x > p_now - k_per[c.i])
                                       FROM __SCHEMA__.key_starts s
                                       WHERE s.queue = p_queue AND s.key = c.key), 0) END AS begun
                         FROM (SELECT k AS key, array_position(k_names, k) AS i
                               FROM unnest(v_locked) AS k) AS c LOOP
                    k_held[r.i] := r.held;
                    k_begun[r.i] := r.begun;
                    k_state[r.i] := 'a';
                END LOOP;
                -- A key still 'c' was held by another claim's lock. The
                -- choice stands if every key it trusted admits what it
                -- chose; else it is made again.
                v_valid := cardinality(v_count) = 0;
                FOR v_i IN 1 .. cardinality(k_names) LOOP
                    IF k_state[v_i] = 'c' AND k_chosen[v_i] > 0 THEN
                        k_state[v_i] := 'l';
                        v_skipped := true;
                        v_valid := false;
                    ELSIF v_valid AND k_state[v_i] = 'a' AND k_chosen[v_i] > 0
                          AND (k_held[v_i] + k_taken[v_i] + k_chosen[v_i]
                                  > coalesce(k_most[v_i], 9223372036854775807)
                               OR k_begun[v_i] + k_taken[v_i] + k_chosen[v_i]
                                  > coalesce(k_rate[v_i], 9223372036854775807)) THEN
                        v_valid := false;
                    END IF;
                END LOOP;
                CONTINUE WHEN NOT v_valid;
            END IF;
            EXIT WHEN cardinality(v_pick) = 0;
            v_got := 0;
            -- Those past their deliveries (and schedules' ticks), one at a
            -- time: to the dead letters, or leased with what their
            -- schedule needs.
            FOREACH v_c IN ARRAY v_pick LOOP
                CONTINUE WHEN NOT c_bury[v_c];
                SELECT * INTO e FROM __SCHEMA__.entries d
                WHERE d.queue = p_queue AND d.id = c_ids[v_c] AND d.run_at <= p_now
                  AND d.priority = v_level AND d.key IS NOT DISTINCT FROM c_keys[v_c]
                FOR UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                c_out[v_c] := true;
                v_got := v_got + 1;
                v_rec := NULL;
                IF e.tick IS NOT NULL THEN
                    SELECT s.rec INTO v_rec FROM __SCHEMA__.schedules s
                    WHERE s.queue = p_queue AND s.name = e.id;
                END IF;
                v_attempts := coalesce(e.max_attempts, p_limit);
                e.attempt := e.attempt + 1;
                e.deadline := coalesce(e.tick, e.run_at);
                v_i := CASE WHEN e.key IS NOT NULL AND v_limits
                    THEN array_position(k_names, e.key) END;
                IF v_attempts > 0 AND e.attempt > v_attempts
                   AND NOT coalesce(left(v_rec, 2) = 'c,', false) THEN
                    e.attempt := v_attempts;
                    v_next := NULL;
                    IF v_rec IS NOT NULL THEN
                        SELECT t.state, t.next INTO v_state, v_next
                        FROM __SCHEMA__.next_tick(v_rec, e.tick, NULL, p_now, NULL) t;
                    END IF;
                    PERFORM __SCHEMA__.bury(p_queue, p_channel, e,
                        'not acked after ' || v_attempts || ' deliveries', p_now);
                    IF e.tick IS NOT NULL THEN
                        PERFORM __SCHEMA__.place_tick(p_queue, p_channel, e.id, v_next);
                    END IF;
                ELSE
                    v_bytes := v_bytes + octet_length(e.value);
                    UPDATE __SCHEMA__.entries d SET run_at = v_lease_end, attempt = e.attempt,
                        deadline = e.deadline, token = p_token, since = p_now
                    WHERE d.queue = p_queue AND d.id = e.id;
                    ids := ids || e.id; vals := vals || e.value; attempts := attempts || e.attempt;
                    deadlines := deadlines || e.deadline; lease_ends := lease_ends || v_lease_end;
                    schedule_recs := schedule_recs || v_rec;
                    whys := whys || CASE WHEN v_attempts > 0 AND e.attempt > v_attempts
                        THEN 'not acked after ' || v_attempts || ' deliveries' END;
                    keys := keys || e.key;
                    priorities := priorities || e.priority;
                    IF v_i IS NOT NULL THEN
                        k_started[v_i] := k_started[v_i] + 1;
                    END IF;
                END IF;
                v_taken := v_taken + 1;
                IF v_i IS NOT NULL THEN
                    k_taken[v_i] := k_taken[v_i] + 1;
                END IF;
                IF e.key IS NOT NULL THEN
                    g_keys := g_keys || e.key;
                    g_runs := g_runs || e.run_at;
                    g_seqs := g_seqs || e.seq;
                END IF;
            END LOOP;
            -- The rest in one statement: locked (FOR UPDATE SKIP LOCKED, a
            -- row another transaction holds left out) and leased.
            WITH chosen AS (
                SELECT x.o, c_ids[x.c] AS id, c_keys[x.c] AS key
                FROM unnest(v_pick) WITH ORDINALITY AS x(c, o)
                WHERE NOT c_bury[x.c]
            ), hit AS (
                SELECT d.ctid AS tid, c.o FROM chosen c
                JOIN __SCHEMA__.entries d ON d.queue = p_queue AND d.id = c.id
                WHERE d.run_at <= p_now AND d.priority = v_level
                  AND d.key IS NOT DISTINCT FROM c.key
                FOR UPDATE OF d SKIP LOCKED
            ), leased AS (
                UPDATE __SCHEMA__.entries d SET run_at = v_lease_end, attempt = d.attempt + 1,
                    deadline = d.run_at, token = p_token, since = p_now
                FROM hit WHERE d.ctid = hit.tid
                RETURNING hit.o, d.id, d.value, d.attempt, d.deadline, d.key, d.priority, d.seq
            )
            SELECT array_agg(l.id ORDER BY l.o), array_agg(l.value ORDER BY l.o),
                   array_agg(l.attempt ORDER BY l.o), array_agg(l.deadline ORDER BY l.o),
                   array_agg(l.key ORDER BY l.o), array_agg(l.priority ORDER BY l.o),
                   array_agg(l.seq ORDER BY l.o), array_agg(l.o ORDER BY l.o),
                   coalesce(sum(octet_length(l.value)), 0)
            INTO l_ids, l_vals, l_attempts, l_deadlines, l_keys, l_prios, l_seqs, l_os, v_lbytes
            FROM leased l;
            IF l_ids IS NOT NULL THEN
                v_n := cardinality(l_ids);
                ids := ids || l_ids; vals := vals || l_vals; attempts := attempts || l_attempts;
                deadlines := deadlines || l_deadlines;
                lease_ends := lease_ends || array_fill(v_lease_end, ARRAY[v_n]);
                schedule_recs := schedule_recs || array_fill(NULL::text, ARRAY[v_n]);
                whys := whys || array_fill(NULL::text, ARRAY[v_n]);
                keys := keys || l_keys;
                priorities := priorities || l_prios;
                v_bytes := v_bytes + v_lbytes;
                v_taken := v_taken + v_n;
                v_got := v_got + v_n;
                FOR v_c IN 1 .. v_n LOOP
                    c_out[v_pick[l_os[v_c]]] := true;
                    CONTINUE WHEN l_keys[v_c] IS NULL;
                    g_keys := g_keys || l_keys[v_c];
                    g_runs := g_runs || l_deadlines[v_c];
                    g_seqs := g_seqs || l_seqs[v_c];
                    IF v_limits THEN
                        v_i := array_position(k_names, l_keys[v_c]);
                        k_taken[v_i] := k_taken[v_i] + 1;
                        k_started[v_i] := k_started[v_i] + 1;
                    END IF;
                END LOOP;
            END IF;
            IF v_capped AND v_got = cardinality(v_pick) THEN
                v_full := true;
            END IF;
            EXIT levels WHEN v_full;
            EXIT WHEN v_got = cardinality(v_pick);
            -- Rows another transaction holds (or that changed since the
            -- window was read): left out, and others chosen in their place.
            v_skipped := true;
            FOREACH v_c IN ARRAY v_pick LOOP
                c_out[v_c] := true;
            END LOOP;
        END LOOP;
        EXIT levels WHEN v_taken >= p_max OR v_full;
        CONTINUE WHEN NOT v_truncated;
        -- Beyond the window, a candidate at a time: the rest of round 1,
        -- then the later rounds.
        v_phase := 2;
        LOOP
            IF v_phase = 2 THEN
                -- The first due entry of each key met there, and the
                -- keyless entries.
                v_need := p_max - v_taken + 16;
                SELECT array_agg(x.id ORDER BY x.run_at, x.seq),
                       array_agg(x.key ORDER BY x.run_at, x.seq),
                       array_agg(x.run_at ORDER BY x.run_at, x.seq),
                       array_agg(x.seq ORDER BY x.run_at, x.seq)
                INTO c_ids, c_keys, c_runs, c_seqs
                FROM ((SELECT h.id, h.key, h.run_at, h.seq FROM (
                           WITH RECURSIVE ks(key) AS (
                               (SELECT d.key FROM __SCHEMA__.entries d
                                WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                                  AND (d.key IS NOT NULL OR d.priority <> 0)
                                  AND d.key IS NOT NULL
                                ORDER BY d.key LIMIT 1)
                               UNION ALL
                               SELECT (SELECT d.key FROM __SCHEMA__.entries d
                                       WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                                         AND (d.key IS NOT NULL OR d.priority <> 0)
                                         AND d.key > ks.key
                                       ORDER BY d.key LIMIT 1)
                               FROM ks WHERE ks.key IS NOT NULL
                           )
                           SELECT n.id, n.key, n.run_at, n.seq FROM ks
                           CROSS JOIN LATERAL (
                               SELECT d.id, d.key, d.run_at, d.seq FROM __SCHEMA__.entries d
                               WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                                 AND (d.key IS NOT NULL OR d.priority <> 0) AND d.key = ks.key
                                 AND d.priority = v_level AND d.run_at <= p_now
                               ORDER BY d.run_at, d.seq LIMIT 1) AS n
                           WHERE ks.key IS NOT NULL) AS h
                       WHERE (h.run_at, h.seq) > (v_end_run, v_end_seq))
                      UNION ALL
                      (SELECT d.id, d.key, d.run_at, d.seq FROM __SCHEMA__.entries d
                       WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                         AND (d.key IS NOT NULL OR d.priority <> 0) AND d.key IS NULL
                         AND d.priority = v_level AND d.run_at <= p_now
                         AND (d.run_at, d.seq) > (v_end_run, v_end_seq)
                       ORDER BY d.run_at, d.seq LIMIT v_need)
                      UNION ALL
                      (SELECT d.id, d.key, d.run_at, d.seq FROM __SCHEMA__.entries d
                       WHERE v_level = 0 AND d.queue = p_queue AND d.run_at IS NOT NULL
                         AND d.key IS NULL AND d.priority = 0 AND d.run_at <= p_now
                         AND (d.run_at, d.seq) > (v_end_run, v_end_seq)
                       ORDER BY d.run_at, d.seq LIMIT v_need)) AS x;
                v_phase := 3;
            ELSE
                -- The next round: the next due entry of each key that gave.
                EXIT WHEN cardinality(g_keys) = 0;
                SELECT array_agg(n.id ORDER BY n.run_at, n.seq),
                       array_agg(n.key ORDER BY n.run_at, n.seq),
                       array_agg(n.run_at ORDER BY n.run_at, n.seq),
                       array_agg(n.seq ORDER BY n.run_at, n.seq)
                INTO c_ids, c_keys, c_runs, c_seqs
                FROM (SELECT DISTINCT ON (x.key) x.key, x.run_at, x.seq
                      FROM unnest(g_keys, g_runs, g_seqs) AS x(key, run_at, seq)
                      ORDER BY x.key, x.run_at DESC, x.seq DESC) AS g
                CROSS JOIN LATERAL (
                    SELECT d.id, d.key, d.run_at, d.seq FROM __SCHEMA__.entries d
                    WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                      AND (d.key IS NOT NULL OR d.priority <> 0) AND d.key = g.key
                      AND d.priority = v_level AND d.run_at <= p_now
                      AND (d.run_at, d.seq) > (g.run_at, g.seq)
                    ORDER BY d.run_at, d.seq LIMIT 1) AS n;
                g_keys := '{}'; g_runs := '{}'; g_seqs := '{}';
            END IF;
            FOR v_c IN 1 .. coalesce(cardinality(c_ids), 0) LOOP
                EXIT levels WHEN v_taken >= p_max OR v_full;
                v_key := c_keys[v_c];
                v_i := NULL;
                IF v_key IS NOT NULL AND v_limits THEN
                    v_i := array_position(k_names, v_key);
                    IF v_i IS NULL THEN
                        v_lim := __SCHEMA__.limit_of(p_queue, v_key);
                        k_names := k_names || v_key;
                        v_i := cardinality(k_names);
                        k_most := k_most || nullif(split_part(v_lim, ',', 1), '')::bigint;
                        k_rate := k_rate || nullif(split_part(v_lim, ',', 2), '')::bigint;
                        k_per := k_per || nullif(split_part(v_lim, ',', 3), '')::bigint;
                        IF k_rate[v_i] IS NULL OR k_per[v_i] IS NULL THEN
                            k_rate[v_i] := NULL;
                            k_per[v_i] := NULL;
                        END IF;
                        k_held := k_held || 0::bigint;
                        k_begun := k_begun || 0::bigint;
                        k_taken := k_taken || 0;
                        k_started := k_started || 0;
                        k_chosen := k_chosen || 0;
                        k_state := k_state || CASE WHEN k_most[v_i] IS NULL
                            AND k_rate[v_i] IS NULL THEN 'u' ELSE 'c' END;
                    END IF;
                    IF k_state[v_i] = 'c' THEN
                        -- Counted without the lock, then under it.
                        FOR v_pass IN 1 .. 2 LOOP
                            v_held := 0;
                            v_begun := 0;
                            IF k_most[v_i] IS NOT NULL THEN
                                SELECT count(*) INTO v_held FROM __SCHEMA__.entries d
                                WHERE d.queue = p_queue AND d.key = v_key
                                  AND d.token IS NOT NULL AND d.run_at > p_now;
                            END IF;
                            IF k_rate[v_i] IS NOT NULL THEN
                                v_begun := coalesce((
                                    SELECT (SELECT count(*) FROM unnest(s.starts) AS x
                                            WHERE x > p_now - k_per[v_i])
                                    FROM __SCHEMA__.key_starts s
                                    WHERE s.queue = p_queue AND s.key = v_key), 0);
                            END IF;
                            IF v_held >= coalesce(k_most[v_i], 9223372036854775807)
                               OR v_begun >= coalesce(k_rate[v_i], 9223372036854775807) THEN
                                k_state[v_i] := 'r';
                                EXIT;
                            END IF;
                            IF v_pass = 2 THEN
                                k_state[v_i] := 'a';
                                k_held[v_i] := v_held;
                                k_begun[v_i] := v_begun;
                            ELSIF NOT pg_try_advisory_xact_lock(hashtext('__SCHEMA__ key'),
                                                                hashtext(p_queue || '/' || v_key)) THEN
                                k_state[v_i] := 'l';
                                v_skipped := true;
                                EXIT;
                            END IF;
                        END LOOP;
                    END IF;
                    IF k_state[v_i] = 'a'
                       AND (k_held[v_i] + k_taken[v_i] >= coalesce(k_most[v_i], 9223372036854775807)
                            OR k_begun[v_i] + k_taken[v_i]
                               >= coalesce(k_rate[v_i], 9223372036854775807)) THEN
                        k_state[v_i] := 'r';
                    END IF;
                    CONTINUE WHEN k_state[v_i] IN ('r', 'l');
                END IF;
                IF v_key IS NOT NULL THEN
                    -- The key's first due entry from the candidate on that no
                    -- other transaction holds.
                    SELECT * INTO e FROM __SCHEMA__.entries d
                    WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                      AND (d.key IS NOT NULL OR d.priority <> 0) AND d.key = v_key
                      AND d.priority = v_level AND d.run_at <= p_now
                      AND (d.run_at, d.seq) >= (c_runs[v_c], c_seqs[v_c])
                    ORDER BY d.run_at, d.seq LIMIT 1 FOR UPDATE SKIP LOCKED;
                ELSE
                    SELECT * INTO e FROM __SCHEMA__.entries d
                    WHERE d.queue = p_queue AND d.id = c_ids[v_c] AND d.key IS NULL
                      AND d.priority = v_level AND d.run_at <= p_now
                    FOR UPDATE SKIP LOCKED;
                END IF;
                IF NOT FOUND THEN
                    v_skipped := true;
                    CONTINUE;
                END IF;
                v_rec := NULL;
                IF e.tick IS NOT NULL THEN
                    SELECT s.rec INTO v_rec FROM __SCHEMA__.schedules s
                    WHERE s.queue = p_queue AND s.name = e.id;
                END IF;
                v_attempts := coalesce(e.max_attempts, p_limit);
                e.attempt := e.attempt + 1;
                e.deadline := coalesce(e.tick, e.run_at);
                IF v_attempts > 0 AND e.attempt > v_attempts
                   AND NOT coalesce(left(v_rec, 2) = 'c,', false) THEN
                    e.attempt := v_attempts;
                    v_next := NULL;
                    IF v_rec IS NOT NULL THEN
                        SELECT t.state, t.next INTO v_state, v_next
                        FROM __SCHEMA__.next_tick(v_rec, e.tick, NULL, p_now, NULL) t;
                    END IF;
                    PERFORM __SCHEMA__.bury(p_queue, p_channel, e,
                        'not acked after ' || v_attempts || ' deliveries', p_now);
                    IF e.tick IS NOT NULL THEN
                        PERFORM __SCHEMA__.place_tick(p_queue, p_channel, e.id, v_next);
                    END IF;
                ELSE
                    IF cardinality(ids) > 0 AND v_bytes + octet_length(e.value) > v_max_bytes THEN
                        v_full := true;
                        EXIT levels;
                    END IF;
                    v_bytes := v_bytes + octet_length(e.value);
                    UPDATE __SCHEMA__.entries d SET run_at = v_lease_end, attempt = e.attempt,
                        deadline = e.deadline, token = p_token, since = p_now
                    WHERE d.queue = p_queue AND d.id = e.id;
                    ids := ids || e.id; vals := vals || e.value; attempts := attempts || e.attempt;
                    deadlines := deadlines || e.deadline; lease_ends := lease_ends || v_lease_end;
                    schedule_recs := schedule_recs || v_rec;
                    whys := whys || CASE WHEN v_attempts > 0 AND e.attempt > v_attempts
                        THEN 'not acked after ' || v_attempts || ' deliveries' END;
                    keys := keys || e.key;
                    priorities := priorities || e.priority;
                    IF v_i IS NOT NULL THEN
                        k_started[v_i] := k_started[v_i] + 1;
                    END IF;
                END IF;
                v_taken := v_taken + 1;
                IF v_i IS NOT NULL THEN
                    k_taken[v_i] := k_taken[v_i] + 1;
                END IF;
                IF v_key IS NOT NULL THEN
                    g_keys := g_keys || v_key;
                    g_runs := g_runs || e.run_at;
                    g_seqs := g_seqs || e.seq;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    more := p_max > 0 AND (v_taken >= p_max OR v_full);
    -- The starts of the keys with a rate (each admitted: its lock held):
    -- their last `max`, none older than `per`.
    FOR v_i IN 1 .. coalesce(cardinality(k_names), 0) LOOP
        IF k_started[v_i] > 0 AND k_rate[v_i] IS NOT NULL THEN
            INSERT INTO __SCHEMA__.key_starts AS s (queue, key, starts)
            VALUES (p_queue, k_names[v_i], array_fill(p_now, ARRAY[k_started[v_i]]))
            ON CONFLICT (queue, key) DO UPDATE SET starts = ARRAY(
                SELECT t.x FROM (SELECT x FROM unnest(s.starts || excluded.starts) AS x
                                 WHERE x > p_now - k_per[v_i]
                                 ORDER BY x DESC LIMIT k_rate[v_i]) AS t
                ORDER BY t.x);
        END IF;
    END LOOP;
    IF more THEN
        head := p_now;
        RETURN;
    END IF;
    head := __SCHEMA__.next_after(p_queue, p_now);
    -- When each key refused for its rate, or whose rate this claim spent,
    -- admits one more: `per` after the oldest of its last `max` starts.
    FOR v_i IN 1 .. coalesce(cardinality(k_names), 0) LOOP
        IF k_rate[v_i] > 0 AND (k_state[v_i] = 'r'
            OR (k_state[v_i] = 'a' AND k_begun[v_i] + k_taken[v_i] >= k_rate[v_i])) THEN
            v_open := (SELECT x FROM __SCHEMA__.key_starts s, unnest(s.starts) AS x
                       WHERE s.queue = p_queue AND s.key = k_names[v_i] AND x > p_now - k_per[v_i]
                       ORDER BY x DESC OFFSET k_rate[v_i] - 1 LIMIT 1) + k_per[v_i];
            head := least(head, v_open);
        END IF;
    END LOOP;
    locked := v_skipped;
END $$;

-- CLAIM: applies ops (see finish_all), then leases up to `p_max` due
-- entries, in order, for `p_lease` ms to the claim `p_token`. An entry past
-- its deliveries (its own max_attempts, else `p_limit`) goes to the dead
-- letters instead (a cron tick is handed out with a reason to bury it in
-- `whys`: its successor needs the client's cron instants). `p_recover`
-- (NULL unless): the claim is sent again after its reply was lost, and its
-- leases end at `p_recover` or later; what it leased then is returned, if
-- it ran. Rows locked by other claims are skipped, so claims never wait on
-- each other. `head`: when the head is due after the claim (NULL: empty
-- queue); `more`: more entries were due than taken; `locked`: due entries
-- were skipped, locked by another transaction (`head` is then the first
-- entry not yet due). `keys` and `priorities`: those of each entry leased.
-- A claim commits durably, like every write: a crash of the server must
-- not forget a lease whose handler already runs (the entry would be due
-- again at once, and run twice side by side). The values it returns add up
-- to at most 16 MiB (or one entry; `more` is then set): an array holds at
-- most 1 GB, and a consumer with many free places and large values would
-- otherwise ask for the same batch forever.
--
-- While no special entry (one with a key or a priority other than 0) is
-- due, which one probe of entries_special tells, the claim walks the plain
-- entries in due order, as it did before keys existed; otherwise it is
-- claim_fair's. (A special entry that a writer commits while a plain claim
-- runs is announced by the writer, and taken by the next claim.)
CREATE OR REPLACE FUNCTION __SCHEMA__.claim(p_queue text, p_channel text, p_max integer,
    p_lease bigint, p_limit integer, p_token text, p_recover bigint,
    p_kinds text[], p_ids text[], p_tokens text[], p_ms bigint[], p_reasons text[],
    p_cands text[], p_dead text, p_keep bigint DEFAULT 0,
    OUT now bigint, OUT head bigint, OUT more boolean, OUT locked boolean,
    OUT results integer[], OUT cron_from bigint[], OUT recs text[],
    OUT ids text[], OUT vals text[], OUT attempts integer[], OUT deadlines bigint[],
    OUT lease_ends bigint[], OUT schedule_recs text[], OUT whys text[],
    OUT keys text[], OUT priorities smallint[], OUT traces text[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_lease_end bigint;
    v_limit integer;
    e __SCHEMA__.entries;
    v_rec text;
    v_state text;
    v_next bigint;
    v_found integer := 0;
    v_bytes bigint := 0;
    v_max_bytes constant bigint := 16 * 1024 * 1024;
    v_due refcursor;
    v_special bigint;
    v_tids tid[];
    v_odd boolean;
BEGIN
    now := __SCHEMA__.now_ms();
    v_lease_end := now + p_lease;
    more := false;
    locked := false;
    IF p_dead <> '' THEN
        PERFORM set_config('punctual.dead', p_dead, true);
    END IF;
    IF p_keep > 0 THEN
        PERFORM set_config('punctual.keep', p_keep::text, true);
    END IF;
    IF coalesce(cardinality(p_kinds), 0) = 0 THEN
        results := '{}'; cron_from := '{}'; recs := '{}';
    ELSE
        SELECT f.results, f.cron_from, f.recs INTO results, cron_from, recs
        FROM __SCHEMA__.finish_all(p_queue, p_channel, p_limit, p_lease, now, p_kinds, p_ids,
            p_tokens, p_ms, p_reasons, p_cands) f;
    END IF;
    ids := '{}'; vals := '{}'; attempts := '{}'; deadlines := '{}'; lease_ends := '{}';
    schedule_recs := '{}'; whys := '{}'; keys := '{}'; priorities := '{}'; traces := '{}';
    IF p_recover IS NULL THEN
        -- A first sending that lands after its claim was given up on ('G'
        -- in finish_one) or sent again leases nothing.
        PERFORM pg_advisory_xact_lock_shared(hashtext('__SCHEMA__ claim'), hashtext(p_token));
        IF EXISTS (SELECT 1 FROM __SCHEMA__.given_up g WHERE g.token = p_token) THEN
            head := __SCHEMA__.head(p_queue);
            RETURN;
        END IF;
    ELSE
        -- Sent again: waits for a first sending still running (it holds
        -- the lock shared), so that what it leased is found below; and
        -- marks the token, so that one landing later leases nothing.
        PERFORM __SCHEMA__.give_up(p_token, now);
    END IF;
    IF p_recover IS NOT NULL THEN
        FOR e IN SELECT * FROM __SCHEMA__.entries d
                 WHERE d.queue = p_queue AND d.run_at >= p_recover
                   AND d.run_at <= now + p_lease + 1000 AND d.token = p_token
                 ORDER BY d.deadline, d.seq LOOP
            SELECT s.rec INTO v_rec FROM __SCHEMA__.schedules s
            WHERE e.tick IS NOT NULL AND s.queue = p_queue AND s.name = e.id;
            v_limit := coalesce(e.max_attempts, p_limit);
            ids := ids || e.id; vals := vals || e.value; attempts := attempts || e.attempt;
            deadlines := deadlines || e.deadline; lease_ends := lease_ends || e.run_at;
            schedule_recs := schedule_recs || v_rec;
            whys := whys || CASE WHEN v_limit > 0 AND e.attempt > v_limit
                THEN 'not acked after ' || v_limit || ' deliveries' END;
            keys := keys || e.key; priorities := priorities || e.priority;
            traces := traces || e.trace;
        END LOOP;
        IF array_length(ids, 1) > 0 THEN
            -- Entries may be due now: the client asks again at once then.
            head := __SCHEMA__.head(p_queue);
            RETURN;
        END IF;
    END IF;
    -- Paused: nothing new is leased, and no head is reported (consumers
    -- wait for resume's notification, or their poll interval). The lock
    -- is pause()'s, shared: a pause waits for the claims running, and
    -- every claim after it sees the mark.
    PERFORM pg_advisory_xact_lock_shared(hashtext('__SCHEMA__ pause'), hashtext(p_queue));
    IF EXISTS (SELECT 1 FROM __SCHEMA__.queues q
               WHERE q.queue = p_queue AND q.paused_at IS NOT NULL) THEN
        RETURN;
    END IF;
    v_special := (SELECT d.run_at FROM __SCHEMA__.entries d
                  WHERE d.queue = p_queue AND d.run_at IS NOT NULL
                    AND (d.key IS NOT NULL OR d.priority <> 0)
                  ORDER BY d.run_at, d.seq LIMIT 1);
    IF v_special <= now THEN
        SELECT f.head, f.more, f.locked, f.ids, f.vals, f.attempts, f.deadlines, f.lease_ends,
               f.schedule_recs, f.whys, f.keys, f.priorities
        INTO head, more, locked, ids, vals, attempts, deadlines, lease_ends, schedule_recs,
             whys, keys, priorities
        FROM __SCHEMA__.claim_fair(p_queue, p_max, p_lease, p_limit, p_token, p_channel, now) f;
        -- One lookup by id each (a join planned once, generic, read the
        -- queue's rows: 2 ms of a claim of 8).
        traces := ARRAY(SELECT (SELECT d.trace FROM __SCHEMA__.entries d
                                WHERE d.queue = p_queue AND d.id = u.id)
                        FROM unnest(ids) WITH ORDINALITY AS u(id, o)
                        ORDER BY u.o);
        RETURN;
    END IF;
    -- One more than asked: if it comes, more are due. Locked in one
    -- statement; when none is due, or none of them is a tick or past its
    -- deliveries and their values fit the reply, they are leased in one
    -- statement by their row addresses (a TID scan: no index lookup).
    -- Otherwise the walk below leases them a row at a time (it meets them
    -- locked by this transaction already).
    SELECT array_agg(c.t ORDER BY c.run_at, c.seq),
           array_agg(c.id ORDER BY c.run_at, c.seq),
           array_agg(c.value ORDER BY c.run_at, c.seq),
           array_agg(c.attempt + 1 ORDER BY c.run_at, c.seq),
           array_agg(c.run_at ORDER BY c.run_at, c.seq),
           array_agg(c.trace ORDER BY c.run_at, c.seq),
           count(*),
           bool_or(c.tick IS NOT NULL OR (coalesce(c.max_attempts, p_limit) > 0
               AND c.attempt + 1 > coalesce(c.max_attempts, p_limit))),
           sum(octet_length(c.value))
    INTO v_tids, ids, vals, attempts, deadlines, traces, v_found, v_odd, v_bytes
    FROM (SELECT d.ctid AS t, d.id, d.value, d.attempt, d.run_at, d.seq, d.trace, d.tick,
                 d.max_attempts
          FROM __SCHEMA__.entries d
          WHERE d.queue = p_queue AND d.run_at <= (SELECT now) AND d.key IS NULL
            AND d.priority = 0
          ORDER BY d.run_at, d.seq
          LIMIT p_max + 1 FOR UPDATE SKIP LOCKED) c;
    IF v_found = 0 OR (NOT v_odd AND (v_found = 1 OR v_bytes <= v_max_bytes)) THEN
        IF v_found = 0 THEN
            v_tids := '{}'; ids := '{}'; vals := '{}'; attempts := '{}'; deadlines := '{}';
            traces := '{}';
        ELSIF v_found > p_max THEN
            more := true;
            head := deadlines[v_found];
            v_tids := v_tids[1:p_max]; ids := ids[1:p_max]; vals := vals[1:p_max];
            attempts := attempts[1:p_max]; deadlines := deadlines[1:p_max];
            traces := traces[1:p_max];
        END IF;
        IF v_found > 0 THEN
            UPDATE __SCHEMA__.entries d SET run_at = v_lease_end, attempt = d.attempt + 1,
                deadline = d.run_at, token = p_token, since = now
            WHERE d.ctid = ANY (v_tids);
        END IF;
        v_found := cardinality(ids);
        lease_ends := array_fill(v_lease_end, ARRAY[v_found]);
        schedule_recs := array_fill(NULL::text, ARRAY[v_found]);
        whys := array_fill(NULL::text, ARRAY[v_found]);
        keys := array_fill(NULL::text, ARRAY[v_found]);
        priorities := array_fill(0::smallint, ARRAY[v_found]);
        IF more THEN
            RETURN;
        END IF;
    ELSE
        ids := '{}'; vals := '{}'; attempts := '{}'; deadlines := '{}'; traces := '{}';
        v_found := 0;
        v_bytes := 0;
        -- (A cursor, so that each lease updates the row it points at, with no
        -- index lookup.)
        OPEN v_due FOR SELECT * FROM __SCHEMA__.entries d
            WHERE d.queue = p_queue AND d.run_at <= (SELECT now) AND d.key IS NULL
              AND d.priority = 0
            ORDER BY d.run_at, d.seq
            LIMIT p_max + 1 FOR UPDATE SKIP LOCKED;
        LOOP
            FETCH v_due INTO e;
            EXIT WHEN NOT FOUND;
            v_found := v_found + 1;
            IF v_found > p_max THEN
                more := true;
                head := e.run_at;
                EXIT;
            END IF;
            v_rec := NULL;
            IF e.tick IS NOT NULL THEN
                SELECT s.rec INTO v_rec FROM __SCHEMA__.schedules s
                WHERE s.queue = p_queue AND s.name = e.id;
            END IF;
            v_limit := coalesce(e.max_attempts, p_limit);
            e.attempt := e.attempt + 1;
            e.deadline := coalesce(e.tick, e.run_at);
            IF v_limit > 0 AND e.attempt > v_limit AND NOT coalesce(left(v_rec, 2) = 'c,', false) THEN
                e.attempt := v_limit;
                v_next := NULL;
                IF v_rec IS NOT NULL THEN
                    SELECT t.state, t.next INTO v_state, v_next
                    FROM __SCHEMA__.next_tick(v_rec, e.tick, NULL, now, NULL) t;
                END IF;
                PERFORM __SCHEMA__.bury(p_queue, p_channel, e, 'not acked after ' || v_limit || ' deliveries',
                    now);
                IF e.tick IS NOT NULL THEN
                    PERFORM __SCHEMA__.place_tick(p_queue, p_channel, e.id, v_next);
                END IF;
            ELSE
                IF cardinality(ids) > 0 AND v_bytes + octet_length(e.value) > v_max_bytes THEN
                    more := true;
                    head := e.run_at;
                    EXIT;
                END IF;
                v_bytes := v_bytes + octet_length(e.value);
                UPDATE __SCHEMA__.entries d SET run_at = v_lease_end, attempt = e.attempt,
                    deadline = e.deadline, token = p_token, since = now
                WHERE CURRENT OF v_due;
                traces := traces || e.trace;
                ids := ids || e.id; vals := vals || e.value; attempts := attempts || e.attempt;
                deadlines := deadlines || e.deadline; lease_ends := lease_ends || v_lease_end;
                schedule_recs := schedule_recs || v_rec;
                whys := whys || CASE WHEN v_limit > 0 AND e.attempt > v_limit
                    THEN 'not acked after ' || v_limit || ' deliveries' END;
            END IF;
        END LOOP;
        CLOSE v_due;
        -- Plain entries only: no key, priority 0.
        keys := array_fill(NULL::text, ARRAY[cardinality(ids)]);
        priorities := array_fill(0::smallint, ARRAY[cardinality(ids)]);
    END IF;
    IF NOT more THEN
        -- The first special entry is the one seen above, not yet due (one
        -- committed since, due now, was announced by its writer).
        head := (SELECT d.run_at FROM __SCHEMA__.entries d
                 WHERE d.queue = p_queue AND d.run_at IS NOT NULL AND d.key IS NULL
                   AND d.priority = 0
                 ORDER BY d.run_at, d.seq LIMIT 1);
        IF head <= now THEN
            -- Due rows the claim skipped are locked by another transaction
            -- (a claim, a caller's remove_in), which may end either way
            -- without a notification: the client asks again soon, and
            -- waits for the first row not yet due otherwise.
            locked := true;
            head := (SELECT d.run_at FROM __SCHEMA__.entries d
                     WHERE d.queue = p_queue AND d.run_at > now AND d.key IS NULL
                       AND d.priority = 0
                     ORDER BY d.run_at, d.seq LIMIT 1);
        END IF;
        head := least(head, v_special);
    END IF;
END $$;

-- EXTEND: pushes the end of held leases (`p_ids[i]`, `p_tokens[i]`) to now
-- + `p_lease`. Each new end, or 0 where the lease was lost (-1: to a
-- cancel, see cancels). A lease end moved before the head is announced,
-- like an insert.
CREATE OR REPLACE FUNCTION __SCHEMA__.extend(p_queue text, p_channel text, p_lease bigint,
    p_ids text[], p_tokens text[]) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_end bigint := v_now + p_lease;
    v_old_head bigint := __SCHEMA__.next_after(p_queue, v_now);
    v_held bigint[];
BEGIN
    -- Locks the rows in id order first, as finish_all does (no deadlock).
    PERFORM 1 FROM __SCHEMA__.entries d
    WHERE d.queue = p_queue AND d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE;
    -- A lease that ran out gave its key's place back: the keys of those
    -- are counted under the claims' lock of each key.
    PERFORM pg_advisory_xact_lock(hashtext('__SCHEMA__ key'), hashtext(p_queue || '/' || k.key))
    FROM (SELECT DISTINCT d.key FROM __SCHEMA__.entries d
          WHERE d.queue = p_queue AND d.id = ANY (p_ids) AND d.key IS NOT NULL
            AND d.run_at <= v_now ORDER BY d.key) k;
    WITH moved AS (
        UPDATE __SCHEMA__.entries d SET run_at = v_end
        FROM unnest(p_ids, p_tokens) WITH ORDINALITY AS o(id, token, ord)
        WHERE d.queue = p_queue AND d.id = o.id AND d.token = o.token
          -- Taken since by another entry of a key at its concurrency, the
          -- place is not taken back.
          AND NOT (d.run_at <= v_now AND d.key IS NOT NULL AND coalesce(
              nullif(split_part(__SCHEMA__.limit_of(p_queue, d.key), ',', 1), '')::bigint,
              9223372036854775807)
            <= (SELECT count(*) FROM __SCHEMA__.entries h
                WHERE h.queue = p_queue AND h.key = d.key AND h.token IS NOT NULL
                  AND h.run_at > v_now))
        RETURNING o.ord
    )
    SELECT coalesce(array_agg(ord), '{}') INTO v_held FROM moved;
    IF array_length(v_held, 1) > 0 THEN
        PERFORM __SCHEMA__.announce(p_channel, v_end, v_old_head);
    END IF;
    IF coalesce(array_length(v_held, 1), 0) = cardinality(p_ids) THEN
        RETURN array_fill(v_end, ARRAY[cardinality(p_ids)]);
    END IF;
    RETURN ARRAY(SELECT CASE WHEN o.ord = ANY (v_held) THEN v_end
                             WHEN c.id IS NOT NULL THEN -1 ELSE 0 END
                 FROM unnest(p_ids, p_tokens) WITH ORDINALITY AS o(id, token, ord)
                 LEFT JOIN __SCHEMA__.cancels c ON c.queue = p_queue AND c.id = o.id
                     AND c.token = o.token AND c.until >= v_end - p_lease
                 ORDER BY o.ord);
END $$;

-- BEAT: a worker's heartbeat: refreshes its record (`p_worker`, JSON
-- `p_record`, gone after three periods of `p_every` ms), forgets a few
-- records gone, and extends its leases as extend() does.
CREATE OR REPLACE FUNCTION __SCHEMA__.beat(p_queue text, p_channel text, p_lease bigint,
    p_ids text[], p_tokens text[], p_worker text, p_record text, p_every bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
BEGIN
    INSERT INTO __SCHEMA__.workers AS w (queue, id, record, first, last, expires)
    VALUES (p_queue, p_worker, p_record, v_now, v_now, v_now + 3 * p_every)
    ON CONFLICT (queue, id) DO UPDATE SET record = excluded.record, last = excluded.last,
        expires = excluded.expires
    WHERE NOT w.gone;
    DELETE FROM __SCHEMA__.workers w
    USING (SELECT o.id FROM __SCHEMA__.workers o WHERE o.queue = p_queue AND o.expires < v_now
           LIMIT 8 FOR UPDATE SKIP LOCKED) AS gone
    WHERE w.queue = p_queue AND w.id = gone.id;
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN '{}';
    END IF;
    RETURN __SCHEMA__.extend(p_queue, p_channel, p_lease, p_ids, p_tokens);
END $$;

-- LEAVE: worker `p_worker` shut down: gone (a minute's tombstone).
CREATE OR REPLACE FUNCTION __SCHEMA__.leave(p_queue text, p_worker text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO __SCHEMA__.workers AS w (queue, id, record, first, last, expires, gone)
    VALUES (p_queue, p_worker, '', __SCHEMA__.now_ms(), __SCHEMA__.now_ms(),
        __SCHEMA__.now_ms() + 60000, true)
    ON CONFLICT (queue, id) DO UPDATE SET gone = true,
        expires = greatest(w.expires, excluded.expires);
$$;

-- LOOKUP: what `wait` knows of id `p_id`: its result if kept (`state` set),
-- else whether a live entry has it (`live`); while one does, the id is
-- looked for (see waits) for `p_wait` ms (the row written only when it
-- would lapse within half of that: waiters of one id share it).
CREATE OR REPLACE FUNCTION __SCHEMA__.lookup(p_queue text, p_id text, p_wait bigint,
    OUT now bigint, OUT live boolean, OUT state text, OUT at bigint, OUT attempts integer,
    OUT output text, OUT reason text) LANGUAGE plpgsql AS $$
BEGIN
    now := __SCHEMA__.now_ms();
    SELECT r.state, r.at, r.attempts, r.output, r.reason INTO state, at, attempts, output, reason
    FROM __SCHEMA__.results r WHERE r.queue = p_queue AND r.id = p_id AND r.until > now;
    IF FOUND THEN
        live := false;
        RETURN;
    END IF;
    live := EXISTS (SELECT 1 FROM __SCHEMA__.entries e
                    WHERE e.queue = p_queue AND e.id = p_id AND e.run_at IS NOT NULL);
    IF live AND p_wait > 0 AND NOT EXISTS (
        SELECT 1 FROM __SCHEMA__.waits w
        WHERE w.queue = p_queue AND w.id = p_id AND w.until >= now + p_wait / 2) THEN
        INSERT INTO __SCHEMA__.waits AS w (queue, id, until) VALUES (p_queue, p_id, now + p_wait)
        ON CONFLICT (queue, id) DO UPDATE SET until = greatest(w.until, excluded.until);
        DELETE FROM __SCHEMA__.waits w
        USING (SELECT o.id FROM __SCHEMA__.waits o WHERE o.queue = p_queue AND o.until < now
               LIMIT 8 FOR UPDATE SKIP LOCKED) AS gone
        WHERE w.queue = p_queue AND w.id = gone.id;
    END IF;
END $$;

-- CANCEL: deletes entry `p_id` at once, pending, due or leased, keeping
-- its result 'c' (for `p_keep` ms; 0: none) and starting its unique
-- window; a leased one's lease is revoked (its holder's finishes find
-- nothing) and marked in `cancels` for its holder's next extension, which
-- is told at once (a notification 'c'). A schedule's tick is replaced by
-- its successor, as at an ack (`p_cands`: the cron instants for it). A
-- dead letter is deleted as remove() does (it keeps its own result).
-- `result`: 0 no such entry; 1 cancelled; 2 cancelled, it was leased;
-- 3 a dead letter deleted; -1 the successor needs the cron instants of
-- `rec` after `cron_from` (nothing changed).
CREATE OR REPLACE FUNCTION __SCHEMA__.cancel(p_queue text, p_channel text, p_id text,
    p_lease bigint, p_keep bigint, p_cands text, OUT result integer, OUT cron_from bigint,
    OUT rec text) LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint;
    e __SCHEMA__.entries;
    v_state text;
    v_next bigint;
    v_leased boolean;
BEGIN
    IF p_keep > 0 THEN
        PERFORM set_config('punctual.keep', p_keep::text, true);
    END IF;
    -- A schedule's row before its tick, as remove() locks them.
    PERFORM 1 FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_id FOR UPDATE;
    SELECT * INTO e FROM __SCHEMA__.entries d WHERE d.queue = p_queue AND d.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        result := 0;
        RETURN;
    END IF;
    v_now := __SCHEMA__.now_ms();
    IF e.run_at IS NULL THEN
        PERFORM __SCHEMA__.remove(p_queue, p_channel, p_id, false);
        result := 3;
        RETURN;
    END IF;
    IF e.tick IS NOT NULL THEN
        SELECT s.rec INTO rec FROM __SCHEMA__.schedules s
        WHERE s.queue = p_queue AND s.name = p_id;
        IF rec IS NOT NULL THEN
            SELECT t.state, t.next INTO v_state, v_next
            FROM __SCHEMA__.next_tick(rec, e.tick, e.since, v_now, p_cands) t;
            IF v_state = 'c' THEN
                result := -1; cron_from := v_next;
                RETURN;
            END IF;
        END IF;
        rec := NULL;
    END IF;
    v_leased := e.token IS NOT NULL AND e.run_at > v_now;
    DELETE FROM __SCHEMA__.entries d WHERE d.queue = p_queue AND d.id = p_id;
    IF e.unique_ms IS NOT NULL THEN
        PERFORM __SCHEMA__.keep_taken(p_queue, ARRAY[p_id], ARRAY[e.unique_ms], v_now);
    END IF;
    IF v_leased AND e.key IS NOT NULL THEN
        PERFORM __SCHEMA__.freed(p_queue, p_channel, ARRAY[e.key], ARRAY[1], NULL, v_now);
    END IF;
    IF e.token IS NOT NULL THEN
        -- Its holder learns of it until its lease would have run out, and
        -- a lease on: by then its own fence stopped it anyway.
        INSERT INTO __SCHEMA__.cancels AS c (queue, id, token, until)
        VALUES (p_queue, p_id, e.token, greatest(e.run_at, v_now) + p_lease)
        ON CONFLICT (queue, id) DO UPDATE SET token = excluded.token, until = excluded.until;
        DELETE FROM __SCHEMA__.cancels c
        USING (SELECT o.id FROM __SCHEMA__.cancels o WHERE o.queue = p_queue AND o.until < v_now
               LIMIT 8 FOR UPDATE SKIP LOCKED) AS gone
        WHERE c.queue = p_queue AND c.id = gone.id;
        PERFORM pg_notify(p_channel, 'c');
    END IF;
    IF e.tick IS NOT NULL THEN
        PERFORM __SCHEMA__.last_run(p_queue, p_id, e.since, 'c');
    END IF;
    PERFORM __SCHEMA__.keep_result(p_queue, p_id, 'c', v_now, e.attempt, NULL, NULL);
    PERFORM __SCHEMA__.push_finished(p_queue, p_channel, ARRAY[p_id]);
    IF e.tick IS NOT NULL AND v_next IS NOT NULL THEN
        PERFORM __SCHEMA__.place_tick(p_queue, p_channel, p_id, v_next);
    END IF;
    result := CASE WHEN v_leased THEN 2 ELSE 1 END;
END $$;

-- PAUSE_SCHEDULE: pauses (`p_pause`) or resumes schedule `p_name`: its
-- pending tick is parked (see parked()), or back at its instant (due at
-- once if that passed: it runs once, late, and the schedule goes on by its
-- rule). -1 no such schedule, 0 no change, 1 changed.
CREATE OR REPLACE FUNCTION __SCHEMA__.pause_schedule(p_queue text, p_channel text, p_name text,
    p_pause boolean) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_paused boolean;
    v_at bigint;
    v_old_head bigint := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
BEGIN
    SELECT s.paused INTO v_paused FROM __SCHEMA__.schedules s
    WHERE s.queue = p_queue AND s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    IF v_paused = p_pause THEN
        RETURN 0;
    END IF;
    -- Then its tick's row, in the order schedule() and remove() lock them:
    -- an ack of the tick under way ends first, so the updates below see the
    -- successor it placed (by the flag it read before this commits).
    PERFORM 1 FROM __SCHEMA__.entries e WHERE e.queue = p_queue AND e.id = p_name FOR UPDATE;
    UPDATE __SCHEMA__.schedules s SET paused = p_pause WHERE s.queue = p_queue AND s.name = p_name;
    IF p_pause THEN
        UPDATE __SCHEMA__.entries e SET run_at = __SCHEMA__.parked()
        WHERE e.queue = p_queue AND e.id = p_name AND e.tick IS NOT NULL AND e.token IS NULL
          AND e.run_at IS NOT NULL;
    ELSE
        UPDATE __SCHEMA__.entries e SET run_at = e.tick
        WHERE e.queue = p_queue AND e.id = p_name AND e.tick IS NOT NULL
          AND e.run_at >= __SCHEMA__.parked()
        RETURNING e.run_at INTO v_at;
        IF v_at IS NOT NULL THEN
            PERFORM __SCHEMA__.announce(p_channel, v_at, v_old_head);
        END IF;
    END IF;
    RETURN 1;
END $$;

-- STATS: {pending, due, leased, dead}, on one clock; an expired lease
-- counts as due.
CREATE OR REPLACE FUNCTION __SCHEMA__.stats(p_queue text, OUT pending bigint, OUT due bigint,
    OUT leased bigint, OUT dead bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
BEGIN
    SELECT count(*) FILTER (WHERE e.run_at > v_now AND e.token IS NULL),
           count(*) FILTER (WHERE e.run_at <= v_now),
           count(*) FILTER (WHERE e.run_at > v_now AND e.token IS NOT NULL),
           count(*) FILTER (WHERE e.run_at IS NULL)
    INTO pending, due, leased, dead
    FROM __SCHEMA__.entries e WHERE e.queue = p_queue;
END $$;

-- SCHEDULE: creates or changes the recurring schedule `p_name` (an
-- upsert). `p_rec`: 'e,<period ms>,<policy>' or 'c,<expression>'; `p_cands`:
-- cron instants (see next_tick; '' for none yet).
-- `result`: 1 created or changed; 0 the same call was made before (nothing
-- changes); -1 a cron schedule needs its instants after `cron_from`
-- (nothing changes); -2 the name is taken by an entry that is not a tick
-- (nothing changes). A changed spec moves a pending tick to the new spec's
-- first instant after now; a leased tick keeps running and its ack follows
-- the new spec. A schedule whose tick is missing gets one.
CREATE OR REPLACE FUNCTION __SCHEMA__.schedule(p_queue text, p_channel text, p_name text,
    p_rec text, p_value text, p_cands text, OUT result integer, OUT cron_from bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_old __SCHEMA__.schedules;
    e __SCHEMA__.entries;
    v_move boolean;
    v_first bigint;
    v_state text;
    v_period bigint;
BEGIN
    -- Serializes upserts of one name (the row may not exist yet).
    PERFORM pg_advisory_xact_lock(hashtext('__SCHEMA__'), hashtext(p_queue || '/' || p_name));
    SELECT * INTO v_old FROM __SCHEMA__.schedules s
    WHERE s.queue = p_queue AND s.name = p_name FOR UPDATE;
    SELECT * INTO e FROM __SCHEMA__.entries d
    WHERE d.queue = p_queue AND d.id = p_name FOR UPDATE;
    IF e.id IS NOT NULL AND e.tick IS NULL THEN
        result := -2;
        RETURN;
    END IF;
    IF v_old.rec = p_rec AND v_old.value = p_value AND e.id IS NOT NULL THEN
        result := 0;
        RETURN;
    END IF;
    v_move := e.id IS NULL OR (v_old.rec IS DISTINCT FROM p_rec AND e.token IS NULL);
    IF v_move THEN
        IF left(p_rec, 2) = 'e,' THEN
            v_period := (string_to_array(p_rec, ','))[2]::bigint;
            -- The grid is anchored at the Unix epoch, so replicas agree.
            v_first := (floor(v_now::numeric / v_period)::bigint + 1) * v_period;
        ELSE
            SELECT t.state, t.next INTO v_state, v_first
            FROM __SCHEMA__.next_tick(p_rec, v_now, NULL, v_now, p_cands) t;
            IF v_state = 'c' THEN
                result := -1; cron_from := v_first;
                RETURN;
            END IF;
        END IF;
    END IF;
    INSERT INTO __SCHEMA__.schedules (queue, name, rec, value)
    VALUES (p_queue, p_name, p_rec, p_value)
    ON CONFLICT (queue, name) DO UPDATE SET rec = excluded.rec, value = excluded.value;
    IF v_old.name IS NULL THEN
        -- A new schedule has no last run (one of an old schedule of this
        -- name, recorded as it was removed, goes).
        DELETE FROM __SCHEMA__.schedule_runs r WHERE r.queue = p_queue AND r.name = p_name;
    END IF;
    IF NOT v_move THEN
        -- The pending tick keeps its instant, and takes the new value.
        UPDATE __SCHEMA__.entries d SET value = p_value
        WHERE d.queue = p_queue AND d.id = p_name;
    -- NULL: a cron expression with no instant left keeps no tick.
    ELSIF NOT __SCHEMA__.place_tick(p_queue, p_channel, p_name, v_first) THEN
        -- A caller's transaction committed an entry of this name while this
        -- waited for it (the look above cannot see one not yet committed):
        -- the name is taken, and the schedule stays as it was.
        IF v_old.name IS NULL THEN
            DELETE FROM __SCHEMA__.schedules s WHERE s.queue = p_queue AND s.name = p_name;
        ELSE
            UPDATE __SCHEMA__.schedules s SET rec = v_old.rec, value = v_old.value
            WHERE s.queue = p_queue AND s.name = p_name;
        END IF;
        result := -2;
        RETURN;
    END IF;
    result := 1;
END $$;

-- SCHEDULES: every schedule with its record, value, next instant (NULL
-- while its tick is leased or missing; a parked tick's instant while
-- paused), whether it is paused, and its last run and outcome.
CREATE OR REPLACE FUNCTION __SCHEMA__.schedules(p_queue text)
RETURNS TABLE (name text, rec text, value text, next bigint, paused boolean, last_run bigint,
    last_outcome text) LANGUAGE sql STABLE AS $$
    SELECT s.name, s.rec, s.value,
        CASE WHEN e.token IS NULL THEN
            CASE WHEN e.run_at >= __SCHEMA__.parked() THEN e.tick ELSE e.run_at END END,
        s.paused, r.last_run, r.last_outcome
    FROM __SCHEMA__.schedules s
    LEFT JOIN __SCHEMA__.entries e ON e.queue = s.queue AND e.id = s.name AND e.tick IS NOT NULL
    LEFT JOIN __SCHEMA__.schedule_runs r ON r.queue = s.queue AND r.name = s.name
    WHERE s.queue = p_queue ORDER BY s.name
$$;

-- PURGE: deletes every entry and schedule of the queue, its key limits,
-- the starts its keys' rates count, its unique windows, its kept results,
-- waits and cancel marks.
-- (Schedules before entries: the order schedule() and remove() lock them.)
CREATE OR REPLACE FUNCTION __SCHEMA__.purge(p_queue text) RETURNS void LANGUAGE sql AS $$
    DELETE FROM __SCHEMA__.schedules WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.entries WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.schedule_runs WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.queues WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.key_limits WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.key_starts WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.uniques WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.results WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.waits WHERE queue = p_queue;
    DELETE FROM __SCHEMA__.cancels WHERE queue = p_queue;
$$;

-- SET_LIMIT: sets the limit of key `p_key` ('*': the default) to `p_limit`
-- ('<concurrency>,<rate max>,<rate per ms>', each empty for no bound), or
-- removes it (NULL). Whether that changed anything; a change is announced
-- (entries held by the old limit may run now), and a key (not the
-- default) left without a rate forgets its starts. Claims read the limits
-- without a lock: those running now follow the old one.
CREATE OR REPLACE FUNCTION __SCHEMA__.set_limit(p_queue text, p_channel text, p_key text,
    p_limit text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_changed boolean;
BEGIN
    IF p_limit IS NULL THEN
        DELETE FROM __SCHEMA__.key_limits l WHERE l.queue = p_queue AND l.key = p_key;
        v_changed := FOUND;
    ELSE
        INSERT INTO __SCHEMA__.key_limits AS l (queue, key, lim) VALUES (p_queue, p_key, p_limit)
        ON CONFLICT (queue, key) DO UPDATE SET lim = excluded.lim
        WHERE l.lim IS DISTINCT FROM excluded.lim;
        v_changed := FOUND;
    END IF;
    IF v_changed THEN
        IF p_key <> '*'
           AND coalesce(split_part(__SCHEMA__.limit_of(p_queue, p_key), ',', 2), '') = '' THEN
            DELETE FROM __SCHEMA__.key_starts s WHERE s.queue = p_queue AND s.key = p_key;
        END IF;
        PERFORM pg_notify(p_channel, __SCHEMA__.now_ms()::text);
    END IF;
    RETURN v_changed;
END $$;

-- PAUSE: pauses (`p_pause`) or resumes the queue: while paused, claims
-- lease nothing, in every process. The lock waits for the claims running
-- (they hold it shared), so once this commits no claim hands anything
-- out. Resuming notifies, so waiting consumers ask at once. Whether it
-- changed the state.
CREATE OR REPLACE FUNCTION __SCHEMA__.pause(p_queue text, p_channel text, p_pause boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_paused boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('__SCHEMA__ pause'), hashtext(p_queue));
    SELECT q.paused_at IS NOT NULL INTO v_paused FROM __SCHEMA__.queues q WHERE q.queue = p_queue;
    IF coalesce(v_paused, false) = p_pause THEN
        RETURN false;
    END IF;
    INSERT INTO __SCHEMA__.queues AS q (queue, paused_at)
    VALUES (p_queue, CASE WHEN p_pause THEN __SCHEMA__.now_ms() END)
    ON CONFLICT (queue) DO UPDATE SET paused_at = excluded.paused_at;
    IF NOT p_pause THEN
        PERFORM pg_notify(p_channel, __SCHEMA__.now_ms()::text);
    END IF;
    RETURN true;
END $$;

-- DEAD_ALL: puts every dead letter back as pending, `p_ms` from now,
-- attempts reset, in their order of death (`p_requeue`), or deletes them
-- all (those with a unique window keep their ids taken for it). How many.
CREATE OR REPLACE FUNCTION __SCHEMA__.dead_all(p_queue text, p_channel text, p_requeue boolean,
    p_ms bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_at bigint := __SCHEMA__.now_ms() + p_ms;
    v_old_head bigint := __SCHEMA__.next_after(p_queue, __SCHEMA__.now_ms());
    v_n bigint;
    v_ids text[];
    v_ms bigint[];
BEGIN
    IF NOT p_requeue THEN
        -- Dead letters with a unique window keep their ids taken for it.
        WITH gone AS (
            DELETE FROM __SCHEMA__.entries d WHERE d.queue = p_queue AND d.run_at IS NULL
            RETURNING d.id, d.unique_ms
        )
        SELECT count(*), array_agg(g.id) FILTER (WHERE g.unique_ms IS NOT NULL),
               array_agg(g.unique_ms) FILTER (WHERE g.unique_ms IS NOT NULL)
        INTO v_n, v_ids, v_ms FROM gone g;
        IF v_ids IS NOT NULL THEN
            PERFORM __SCHEMA__.keep_taken(p_queue, v_ids, v_ms, __SCHEMA__.now_ms());
        END IF;
        RETURN v_n;
    END IF;
    WITH dead AS MATERIALIZED (
        SELECT x.id, nextval('__SCHEMA__.seq') AS seq
        FROM (SELECT d.id FROM __SCHEMA__.entries d
              WHERE d.queue = p_queue AND d.run_at IS NULL
              ORDER BY d.died_at, d.seq FOR UPDATE) AS x
    ), moved AS (
        UPDATE __SCHEMA__.entries e SET run_at = v_at, seq = dead.seq, attempt = 0,
            deadline = NULL, reason = NULL, died_at = NULL, errors = NULL
        FROM dead WHERE e.queue = p_queue AND e.id = dead.id
        RETURNING e.id
    ), forgot AS (
        -- Their next finishes are the ones to wait for.
        DELETE FROM __SCHEMA__.results r USING moved m
        WHERE r.queue = p_queue AND r.id = m.id
    )
    SELECT count(*) INTO v_n FROM moved;
    IF v_n > 0 THEN
        PERFORM __SCHEMA__.announce(p_channel, v_at, v_old_head);
    END IF;
    RETURN v_n;
END $$;

-- PAGE: up to `p_limit` entries in state `p_state` ('p' pending, 'd' due,
-- 'l' leased, 'x' dead) after (`p_score`, `p_seq`) in that state's order:
-- (run_at, seq) for the live states (run_at: due time, or lease end),
-- (died_at, seq) for the dead. Each page is an index range scan, or two
-- merged: entries_plain and entries_special (due, and pending, which steps
-- over the leased entries among them), entries_leased, entries_dead.
CREATE OR REPLACE FUNCTION __SCHEMA__.page(p_queue text, p_state text, p_score bigint,
    p_seq bigint, p_limit integer)
RETURNS TABLE (o_now bigint, o_id text, o_score bigint, o_seq bigint, o_attempt integer,
    o_deadline bigint, o_tick boolean, o_reason text, o_value text, o_key text,
    o_priority smallint, o_schedule text, o_errors text, o_since bigint, o_token text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_score bigint := p_score;
    v_seq bigint := p_seq;
BEGIN
    IF p_state IN ('p', 'l') AND (v_score, v_seq) < (v_now, 9223372036854775807) THEN
        -- Not yet due (pending), or held (leased): after now.
        v_score := v_now;
        v_seq := 9223372036854775807;
    END IF;
    IF p_state = 'd' THEN
        RETURN QUERY SELECT v_now, x.id, x.run_at, x.seq, x.attempt, x.deadline,
            x.tick IS NOT NULL, x.reason, x.value, x.key, x.priority,
            x.schedule, x.errors::text, x.since, x.token
        FROM ((SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL AND e.key IS NULL
                 AND e.priority = 0 AND e.run_at <= v_now
                 AND (e.run_at, e.seq) > (v_score, v_seq)
               ORDER BY e.run_at, e.seq LIMIT p_limit)
              UNION ALL
              (SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL
                 AND (e.key IS NOT NULL OR e.priority <> 0) AND e.run_at <= v_now
                 AND (e.run_at, e.seq) > (v_score, v_seq)
               ORDER BY e.run_at, e.seq LIMIT p_limit)) AS x
        ORDER BY x.run_at, x.seq LIMIT p_limit;
    ELSIF p_state = 'p' THEN
        -- A parked tick's deadline: its instant (see parked()).
        RETURN QUERY SELECT v_now, x.id, x.run_at, x.seq, x.attempt,
            CASE WHEN x.run_at >= __SCHEMA__.parked() THEN x.tick ELSE x.deadline END,
            x.tick IS NOT NULL, x.reason, x.value, x.key, x.priority,
            x.schedule, x.errors::text, x.since, x.token
        FROM ((SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL AND e.key IS NULL
                 AND e.priority = 0 AND e.token IS NULL
                 AND (e.run_at, e.seq) > (v_score, v_seq)
               ORDER BY e.run_at, e.seq LIMIT p_limit)
              UNION ALL
              (SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL
                 AND (e.key IS NOT NULL OR e.priority <> 0) AND e.token IS NULL
                 AND (e.run_at, e.seq) > (v_score, v_seq)
               ORDER BY e.run_at, e.seq LIMIT p_limit)) AS x
        ORDER BY x.run_at, x.seq LIMIT p_limit;
    ELSIF p_state = 'l' THEN
        RETURN QUERY SELECT v_now, e.id, e.run_at, e.seq, e.attempt, e.deadline,
            e.tick IS NOT NULL, e.reason, e.value, e.key, e.priority,
            e.schedule, e.errors::text, e.since, e.token
        FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.token IS NOT NULL
          AND (e.run_at, e.seq) > (v_score, v_seq)
        ORDER BY e.run_at, e.seq LIMIT p_limit;
    ELSE
        RETURN QUERY SELECT v_now, e.id, e.died_at, e.seq, e.attempt, e.deadline,
            e.tick IS NOT NULL, e.reason, e.value, e.key, e.priority,
            e.schedule, e.errors::text, e.since, e.token
        FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.run_at IS NULL
          AND (e.died_at, e.seq) > (v_score, v_seq)
        ORDER BY e.died_at, e.seq LIMIT p_limit;
    END IF;
END $$;

-- PAGE_NEWEST: as page, each state's order walked backwards, from before
-- (`p_score`, `p_seq`) (the largest bigints: from the end).
CREATE OR REPLACE FUNCTION __SCHEMA__.page_newest(p_queue text, p_state text, p_score bigint,
    p_seq bigint, p_limit integer)
RETURNS TABLE (o_now bigint, o_id text, o_score bigint, o_seq bigint, o_attempt integer,
    o_deadline bigint, o_tick boolean, o_reason text, o_value text, o_key text,
    o_priority smallint, o_schedule text, o_errors text, o_since bigint, o_token text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_now bigint := __SCHEMA__.now_ms();
    v_score bigint := p_score;
    v_seq bigint := p_seq;
BEGIN
    IF p_state = 'd' THEN
        RETURN QUERY SELECT v_now, x.id, x.run_at, x.seq, x.attempt, x.deadline,
            x.tick IS NOT NULL, x.reason, x.value, x.key, x.priority,
            x.schedule, x.errors::text, x.since, x.token
        FROM ((SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL AND e.key IS NULL
                 AND e.priority = 0 AND e.run_at <= v_now
                 AND (e.run_at, e.seq) < (v_score, v_seq)
               ORDER BY e.run_at DESC, e.seq DESC LIMIT p_limit)
              UNION ALL
              (SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL
                 AND (e.key IS NOT NULL OR e.priority <> 0) AND e.run_at <= v_now
                 AND (e.run_at, e.seq) < (v_score, v_seq)
               ORDER BY e.run_at DESC, e.seq DESC LIMIT p_limit)) AS x
        ORDER BY x.run_at DESC, x.seq DESC LIMIT p_limit;
    ELSIF p_state = 'p' THEN
        -- A parked tick's deadline: its instant (see parked()).
        RETURN QUERY SELECT v_now, x.id, x.run_at, x.seq, x.attempt,
            CASE WHEN x.run_at >= __SCHEMA__.parked() THEN x.tick ELSE x.deadline END,
            x.tick IS NOT NULL, x.reason, x.value, x.key, x.priority,
            x.schedule, x.errors::text, x.since, x.token
        FROM ((SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL AND e.key IS NULL
                 AND e.priority = 0 AND e.token IS NULL AND e.run_at > v_now
                 AND (e.run_at, e.seq) < (v_score, v_seq)
               ORDER BY e.run_at DESC, e.seq DESC LIMIT p_limit)
              UNION ALL
              (SELECT e.* FROM __SCHEMA__.entries e
               WHERE e.queue = p_queue AND e.run_at IS NOT NULL
                 AND (e.key IS NOT NULL OR e.priority <> 0) AND e.token IS NULL
                 AND e.run_at > v_now
                 AND (e.run_at, e.seq) < (v_score, v_seq)
               ORDER BY e.run_at DESC, e.seq DESC LIMIT p_limit)) AS x
        ORDER BY x.run_at DESC, x.seq DESC LIMIT p_limit;
    ELSIF p_state = 'l' THEN
        RETURN QUERY SELECT v_now, e.id, e.run_at, e.seq, e.attempt, e.deadline,
            e.tick IS NOT NULL, e.reason, e.value, e.key, e.priority,
            e.schedule, e.errors::text, e.since, e.token
        FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.token IS NOT NULL AND e.run_at > v_now
          AND (e.run_at, e.seq) < (v_score, v_seq)
        ORDER BY e.run_at DESC, e.seq DESC LIMIT p_limit;
    ELSE
        RETURN QUERY SELECT v_now, e.id, e.died_at, e.seq, e.attempt, e.deadline,
            e.tick IS NOT NULL, e.reason, e.value, e.key, e.priority,
            e.schedule, e.errors::text, e.since, e.token
        FROM __SCHEMA__.entries e
        WHERE e.queue = p_queue AND e.run_at IS NULL
          AND (e.died_at, e.seq) < (v_score, v_seq)
        ORDER BY e.died_at DESC, e.seq DESC LIMIT p_limit;
    END IF;
END $$;
