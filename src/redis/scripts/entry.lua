-- ENTRY: one entry in any state.
-- KEYS: the queue's keys. ARGV: id.
-- Returns {now, score, dead (0/1), record, value, reason, errors (see
-- `add_error`), a dead tick's schedule}, or false if there is no such
-- entry. `score`: its due time, or lease end while
-- leased; a dead letter's: when it died.
local err = check_all()
if err then return err end
local id = ARGV[1]
local got = redis.call('HMGET', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id,
  'n:' .. id)
local e = parse(got[1])
if not e then return false end
local now = now_ms()
local died = redis.call('ZSCORE', DEAD, id)
local score, dead = nil, 0
if died then
  score, dead = tonumber(died), 1
elseif e.member ~= '' then
  score = tonumber(redis.call('ZSCORE', zset_of(e), e.member))
end
if not score then return false end
return {now, score, dead, got[1], got[2] or false, got[3] or false, got[4] or '', got[5] or ''}
