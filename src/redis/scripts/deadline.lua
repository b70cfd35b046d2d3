-- DEADLINE: when an entry is due (its lease end while leased).
-- KEYS: the queue's eight keys. ARGV: id.
-- Returns the score in ms, or nil for an entry that is absent or dead.
local e = check_all()
if e then return e end
local member = redis.call('HGET', IDS, ARGV[1])
if not member then return false end
local score = redis.call('ZSCORE', SCHEDULE, member)
if not score then return false end
return tonumber(score)
