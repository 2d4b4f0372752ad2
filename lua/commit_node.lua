#!lua flags=allow-cross-slot-keys
-- commit_node.lua: commit.lua for a cluster master. The gateway read keys of
-- many hash slots on one master (a GET each), decided, and sends what it
-- read and what it would write, in one run for the whole master: a run may
-- declare keys of one slot only, so it declares the first and names the
-- others in ARGV, which the allow-cross-slot-keys flag lets it reach when
-- they are served by this master. Every key is read before any is
-- written: a key this master does not serve (its slot moved, or is moving
-- and the key left) raises an error at its read, with nothing written, and
-- the gateway decides those decisions again in freqcap.lua.
--
-- KEYS[1]  the first key of the run (it routes the run to its master).
-- ARGV[1]  n, the number of keys; ARGV[2 .. n+1] the keys, the first being
--          KEYS[1].
-- ARGV     then per key, three values, as commit.lua takes them: the value
--          read ('' when the key did not exist), the value to write, and
--          the write (a TTL in ms, WRITE_DELETE or WRITE_CHECK).
--          Then the component of each key, packed "<I4" in key order: the
--          keys of one component are written all or none; a component is
--          written when all its keys are unchanged.
--
-- Reply:   for each component not written, the first of its keys that
--          changed (i, 1-based), as an array; empty when everything was
--          written.

local WRITE_CHECK, WRITE_DELETE = '', 'del'
-- The components are unpacked CHUNK at a time: one call, not one a key,
-- with unpack's stack bounded (as in commit.lua).
local CHUNK = 4000

local n = tonumber(ARGV[1])
local packed = ARGV[2 + 4 * n]
local comps = {}
for first = 1, n, CHUNK do
  local m = math.min(CHUNK, n - first + 1)
  local part = {struct.unpack('<' .. string.rep('I4', m), packed, 4 * (first - 1) + 1)}
  for j = 1, m do comps[first + j - 1] = part[j] end
end

-- Key i is ARGV[1 + i]; its read, value and write are ARGV[n + 3i - 1],
-- ARGV[n + 3i] and ARGV[n + 3i + 1].
local call = redis.call
local refused, list = {}, {}
for i = 1, n do
  if (call('GET', ARGV[1 + i]) or '') ~= ARGV[n + 3 * i - 1] then
    local c = comps[i]
    if not refused[c] then
      refused[c] = true
      list[#list + 1] = i
    end
  end
end
for i = 1, n do
  local ttl = ARGV[n + 3 * i + 1]
  if refused[comps[i]] then
    -- not written: its component found a key changed
  elseif ttl == WRITE_DELETE then
    call('DEL', ARGV[1 + i])
  elseif ttl ~= WRITE_CHECK then
    call('SET', ARGV[1 + i], ARGV[n + 3 * i], 'PX', ttl)
  end
end
return list
