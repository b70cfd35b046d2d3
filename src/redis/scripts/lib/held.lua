-- The record of entry `id` if the claim `token` still holds its lease: the
-- entry was neither delivered again, nor given back, nor removed since (each
-- of which changes or clears its token; tokens never repeat, not even after
-- a purge). Reads ENTRIES.
local function held(id, token)
  local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id))
  if e and token ~= '' and e.token == token then return e end
  return nil
end
