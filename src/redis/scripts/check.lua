-- CHECK: run when a queue is built: fails if a key holds a foreign type.
-- KEYS: the queue's eight keys. ARGV: none. Returns 1.
local e = check_all()
if e then return e end
return 1
