-- FINISH: acks, retries, fails, buries or gives back deliveries (see
-- lib/finish.lua), without claiming.
-- KEYS: the queue's seven keys. ARGV: max attempts (0 = no limit), channel,
-- number of ops, then 6 fields per op (kind, id, token, ms, reason, cands).
-- Returns {now, {op results}}.
-- Atomic: each lease check and what it guards run in one script.
local now = now_ms()
local results, err = finish_all(4, tonumber(ARGV[3]), now, tonumber(ARGV[1]), ARGV[2])
if err then return err end
return {now, results}
