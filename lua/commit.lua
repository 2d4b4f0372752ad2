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
--          Then, optionally, one more value: the component of each key,
--          packed "<I4" in the order of KEYS. The keys of one component
--          are written all or none; a component is written when all its
--          keys are unchanged, whatever the other components find (the
--          entries of a batch send under "drop" that share no key).
--
-- Reply:   without components: 0 when written; else i, the first key that
--          changed (nothing is written).
--          With components: for each component not written, the first of
--          its keys that changed (i), as an array; empty when everything
--          was written.

local WRITE_CHECK, WRITE_DELETE = '', 'del'
-- The keys are read with MGET, CHUNK at a time: one call instead of a GET
-- per key saves Redis about 0.2 us a key, and unpack's stack is bounded.
local CHUNK = 4000

local comps -- each key's component, or nil: all keys are one
if #ARGV > 3 * #KEYS then
  comps = {}
  local packed = ARGV[#ARGV]
  for first = 1, #KEYS, CHUNK do
    local n = math.min(CHUNK, #KEYS - first + 1)
    local part = {struct.unpack('<' .. string.rep('I4', n), packed, 4 * (first - 1) + 1)}
    for j = 1, n do comps[first + j - 1] = part[j] end
  end
end

local refused, list = {}, {}
for first = 1, #KEYS, CHUNK do
  local last = math.min(first + CHUNK - 1, #KEYS)
  local now = redis.call('MGET', unpack(KEYS, first, last))
  for i = first, last do
    if (now[i - first + 1] or '') ~= ARGV[3 * i - 2] then
      if not comps then return i end
      local c = comps[i]
      if not refused[c] then
        refused[c] = true
        list[#list + 1] = i
      end
    end
  end
end
for i = 1, #KEYS do
  local ttl = ARGV[3 * i]
  if comps and refused[comps[i]] then
    -- not written: its component found a key changed
  elseif ttl == WRITE_DELETE then
    redis.call('DEL', KEYS[i])
  elseif ttl ~= WRITE_CHECK then
    redis.call('SET', KEYS[i], ARGV[3 * i - 1], 'PX', ttl)
  end
end
if comps then return list end
return 0
