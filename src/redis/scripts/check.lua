-- CHECK: run when a queue is built: fails if a key holds a foreign type.
-- KEYS: the queue's keys. ARGV: none. Returns 1.
local err = check_all()
if err then return err end
return 1
