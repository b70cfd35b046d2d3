-- `ensure` for every key, for the scripts off the hot path.
local function check_all()
  return ensure(SCHEDULE, 'zset') or ensure(IDS, 'hash') or ensure(VALUES, 'hash')
    or ensure(ATTEMPTS, 'hash') or ensure(LEASES, 'zset') or ensure(DEAD, 'zset')
    or ensure(REASONS, 'hash') or ensure(SEQ, 'string')
end
