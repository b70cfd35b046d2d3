-- FINISH: acks, retries, fails, buries or gives back deliveries (see
-- lib/finish.lua), without claiming.
-- KEYS: the queue's keys. ARGV: the handle's rules (max attempts,
-- dead-letter retention: see `rules`), channel, request identity ('' on a
-- single server; see lib/requests.lua), number of ops, then 7 fields per
-- op (kind, id, token, ms, reason, cands, output: an ack's JSON, or '').
-- Returns {now, {op results}}; a second execution of the request, the
-- results of the first.
-- Atomic: each lease check and what it guards run in one script.
local now = now_ms()
local ledger = ledger_of(ARGV[3])
local kept = ledger and ledger.recall()
local results, err = finish_all(5, tonumber(ARGV[4]), now, rules(ARGV[1]), ARGV[2])
if err then return err end
if kept then
  ledger.first_results(results, kept)
elseif ledger then
  local codes, changed = ledger.result_codes(results)
  if changed then ledger.remember(codes, now) end
end
count_history(now)
announce_finished(ARGV[2], now)
return {now, results}
