-- Whether the delivery (id, member, attempt) still holds its lease: the entry
-- is leased, and neither delivered again (attempt) nor removed and inserted
-- again, retried, reset or requeued (each of which gives a new member).
-- Reads `ids`, `leases` and `attempts`.
local function held(id, member, attempt)
  if redis.call('HGET', IDS, id) ~= member then return false end
  if not redis.call('ZSCORE', LEASES, id) then return false end
  return redis.call('HGET', ATTEMPTS, id) == attempt
end
