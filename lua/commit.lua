-- commit.lua: the write half of a decision made in Go. The gateway read the
-- keys (MGET), decided, and sends what it read and what it would write; the
-- writes happen only if every key still holds what was read, all or none.
-- So a batch of decisions is atomic as if the script had decided it, and a
-- conflict (another gateway, or another batch, wrote in between) costs only
-- a retry: the gateway then decides the batch in freqcap.lua.
--
-- KEYS[i]  the keys the decisions read.
-- ARGV     per key, three values: the value read ('' when the key did not
--          exist), the value to write, and the write: a TTL in ms (SET ...
--          PX), WRITE_DELETE (DEL), or WRITE_CHECK (only check the key is
--          unchanged). The Go side names them alike; a test holds the two
--          equal.
--
-- Reply:   0 when written; else i, the first key that changed (nothing is
--          written).

local WRITE_CHECK, WRITE_DELETE = '', 'del'

for i = 1, #KEYS do
  if (redis.call('GET', KEYS[i]) or '') ~= ARGV[3 * i - 2] then return i end
end
for i = 1, #KEYS do
  local ttl = ARGV[3 * i]
  if ttl == WRITE_DELETE then
    redis.call('DEL', KEYS[i])
  elseif ttl ~= WRITE_CHECK then
    redis.call('SET', KEYS[i], ARGV[3 * i - 1], 'PX', ttl)
  end
end
return 0
