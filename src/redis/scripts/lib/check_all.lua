-- `ensure` for every key, for the scripts off the hot path.
local function check_all()
  return ensure(SCHEDULE, 'zset') or ensure(ENTRIES, 'hash') or ensure(LEASES, 'zset')
    or ensure(DEAD, 'zset') or ensure(SEQ, 'string') or ensure(SCHEDULES, 'hash')
    or ensure(GIVEN_UP, 'zset') or ensure(REQUESTS, 'zset') or ensure(SPECIAL, 'zset')
    or ensure(READY, 'zset') or ensure(HELD, 'zset') or ensure(LIMITS, 'hash')
    or ensure(UNIQUE, 'zset') or ensure(KEPT, 'zset') or ensure(MARKS, 'zset')
    or ensure(WORKERS, 'hash')
end

