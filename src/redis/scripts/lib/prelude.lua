-- Every script starts with this: names for the queue's keys (KEYS[1..8], in
-- the order of `Keys` in scripts.rs) and `ensure`.
--
-- Redis does not roll a script back when a command in it fails: the writes
-- before the failure stay. So every script makes sure of the type of each
-- key it writes before its first write, by a read it needs anyway (a read of
-- a key of another type fails) or by `ensure`.
local SCHEDULE, IDS, VALUES, ATTEMPTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LEASES, DEAD, REASONS, SEQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- An error reply if `key` holds something other than `want`.
local function ensure(key, want)
  local have = redis.call('TYPE', key)['ok']
  if have ~= 'none' and have ~= want then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' of this queue holds a '
      .. have .. ', not a ' .. want)
  end
end
