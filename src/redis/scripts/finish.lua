-- FINISH: acks, retries, fails, buries or gives back deliveries (see
-- lib/finish.lua), without claiming.
-- KEYS: the queue's eight keys. ARGV: the handle's rules (max attempts,
-- dead-letter retention: see `rules`), channel,
-- request id ('' on a single server) and ms to keep the answer (see
-- lib/requests.lua), number of ops, then 6 fields per op (kind, id, token,
-- ms, reason, cands).
-- Returns {now, {op results}}; a second execution of the request, the
-- results of the first.
-- Atomic: each lease check and what it guards run in one script.
local now = now_ms()
local rid, keep = ARGV[3], tonumber(ARGV[4])
local kept = recall(rid)
local results, err = finish_all(6, tonumber(ARGV[5]), now, rules(ARGV[1]), ARGV[2])
if err then return err end
if kept then
  first_results(results, kept)
else
  local codes, changed = result_codes(results)
  if changed then remember(rid, keep, codes, now) end
end
return {now, results}
