-- startcheck.lua: what the gateway's Redis user may do inside a script,
-- asked once when a store starts (limiter/redisstore/startcheck.go), so that a
-- user missing a permission is told at start, not at the first send.
-- freqcap.lua and commit.lua call TIME, GET, SET, DEL and MGET through
-- redis.call, which Redis checks against the user as if sent directly;
-- each is tried here with redis.pcall, which returns a refusal instead of
-- raising it. Nothing outlives the run: the probe key is written with a
-- one-second TTL and deleted at once.
--
-- KEYS[1]  the probe key: <prefix>!startcheck{<tag>}. No rule can name
--          it ('!' is not allowed in a dimension name), and it matches the
--          user's key pattern exactly when the store's keys do.
-- ARGV     none.
--
-- Reply:   an array of pairs, the command refused ('get') and the server's
--          reason, one pair per refusal; empty when every call was allowed.

local refused = {}
local function try(name, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    refused[#refused + 1] = name
    refused[#refused + 1] = r.err
  end
end

try('time', 'TIME')
try('get', 'GET', KEYS[1])
try('mget', 'MGET', KEYS[1])
try('set', 'SET', KEYS[1], 'startcheck', 'PX', 1000)
try('del', 'DEL', KEYS[1])
return refused
