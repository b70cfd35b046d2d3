-- RESET: moves a pending entry to now + delay, ordered as if inserted now
-- (a tick moves its instant with it).
-- KEYS: the queue's seven keys. ARGV: id, delay ms, channel.
-- Returns 1, or 0 for an entry that is leased, dead or absent.
local err = check_all() or check_seq()
if err then return err end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. ARGV[1]))
if not e or e.token ~= '' or e.member == '' then return 0 end
local at = now_ms() + tonumber(ARGV[2])
if e.tick then e.tick = at end
place(ARGV[1], e, at, ARGV[3])
return 1
