-- SCHEDULES: lists every schedule of the queue.
-- KEYS: the queue's keys. ARGV: none.
-- Returns {{name, record, value, next (ms) or -1 while leased or absent, last run ('<since>,<state>' or ''), paused (0/1)}, ...}.
local err = check_all()
if err then return err end
local all = redis.call('HGETALL', SCHEDULES)
local out = {}
for i = 1, #all, 2 do
  local name = all[i]
  local got = redis.call('HMGET', ENTRIES, 'm:' .. name, 'v:' .. name, 's:' .. name,
    'p:' .. name)
  local e = parse(got[1])
  local next = -1
  if e and e.tick and e.token == '' and e.member ~= '' then
    local score = tonumber(redis.call('ZSCORE', zset_of(e), e.member))
    -- A paused schedule's parked tick (at PARKED, or out of SCHEDULE where
    -- an earlier version parked it): its due time is kept aside.
    if not score or score >= PARKED then score = tonumber(got[4]) end
    next = score or -1
  end
  out[#out + 1] = {name, all[i + 1], got[2] or '', next, got[3] or '', got[4] and 1 or 0}
end
return out
