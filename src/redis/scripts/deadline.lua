-- DEADLINE: when an entry is due (its lease end while leased; a paused
-- schedule's tick: its instant).
-- KEYS: the queue's keys. ARGV: id.
-- Returns the score in ms, or nil for an entry that is absent or dead.
local err = check_all()
if err then return err end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. ARGV[1]))
if not e or e.member == '' then return false end
local score = tonumber(redis.call('ZSCORE', zset_of(e), e.member))
if not score then return false end
-- A parked tick (see pause_schedule.lua) is due at its instant once resumed.
if score >= PARKED and e.tick then return e.tick end
return score
