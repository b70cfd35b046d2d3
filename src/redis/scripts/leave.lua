-- LEAVE: a worker shut down: its record goes.
-- KEYS: the queue's keys. ARGV: worker id.
-- Returns 1 if it had one.
local err = ensure(WORKERS, 'hash')
if err then return err end
return redis.call('HDEL', WORKERS, ARGV[1])
