-- NOW: the server's clock, the one every script reads.
-- KEYS: the queue's keys (not read: they send the call to the
-- queue's node of a cluster). ARGV: none.
-- Returns ms since the Unix epoch.
return now_ms()
