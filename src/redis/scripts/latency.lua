-- LATENCY: how long the oldest due entry has waited: now minus the head's
-- score (its due time, or a lease's end that ran out) when it is due.
-- KEYS: the queue's keys. ARGV: none.
-- Returns the wait in ms, or -1 when nothing is due. O(log n).
local err = check_all()
if err then return err end
local now = now_ms()
local at = head()
if not at or at > now then return -1 end
return now - at
