-- freqcap.lua: one atomic step over the record logs of a group of keys that
-- share a hash tag (on a standalone server, of every key of a request).
-- It is the algorithm of limiter/log.go; the differential test holds the two
-- to the same answers.
--
-- KEYS[k]   a log key: a string packing every sub-log (one per dimension
--           tuple and weight) of one first-dimension value. Times are ms.
--           Per sub-log: varint id length, id, varint retention (s),
--           varint entry count, entries, varint tomb count, tombs. An entry
--           is varint(delta*2 + flag) with delta from the previous entry's
--           time (the first from 0), then varint(cost) when flag is 1 (cost
--           is 1 otherwise). Tombs are absolute times of refunded records
--           of a bucketed log.
-- ARGV[1]   op: "d" decide and record, "p" peek (decide, record nothing),
--           "r" refund, "x" reset
-- ARGV[2]   now in ms since the epoch, or 0 for the server's TIME
-- ARGV[3]   d, p: the number of decisions, decided in order as if one by
--           one (concurrent requests batched into one run); each is its
--           section count, then per section: key index, sub-log id,
--           retention ms, grain ms, cost, rule count, then per rule: limit,
--           window ms, and when window is 0 (a calendar rule) four period
--           starts.
--           r, x: the number of sections, then per section:
--   r:      key index, sub-log id, grain ms, record time, cost
--   x:      key index, sub-log id
--
-- Reply:
--   d, p:   {now, then per decision: admitted 1|0, record time per section
--           (0 when nothing was recorded), then per rule: used, reset ms,
--           retry ms, admits 1|0}
--   r:      number of sections whose record was given back
--   x:      number of sub-logs forgotten
-- Errors:   "CLOCKSKEW ..." when now is outside a rule's period starts.

local byte, char, sub, floor = string.byte, string.char, string.sub, math.floor
local unpack = unpack or table.unpack
local SLACK = 60000 -- a key outlives its last record's retention by this

local function getvar(s, i)
  local v, m = 0, 1
  while true do
    local b = byte(s, i)
    i = i + 1
    if b < 128 then return v + b * m, i end
    v = v + (b - 128) * m
    m = m * 128
  end
end

local function putvar(buf, n, v)
  while v >= 128 do
    n = n + 1
    buf[n] = 128 + v % 128
    v = floor(v / 128)
  end
  n = n + 1
  buf[n] = v
  return n
end

-- decode returns the sub-logs of a key, by id and in order, pruned at now.
local function decode(blob, now)
  local subs, order = {}, {}
  if not blob then return subs, order end
  local pos, len = 1, #blob
  while pos <= len do
    local n
    n, pos = getvar(blob, pos)
    local id = sub(blob, pos, pos + n - 1)
    pos = pos + n
    local ret
    ret, pos = getvar(blob, pos)
    ret = ret * 1000
    local cut = now - ret
    n, pos = getvar(blob, pos)
    local ts, cs, k, t = {}, {}, 0, 0
    for _ = 1, n do
      local v, c = 0, 1
      v, pos = getvar(blob, pos)
      if v % 2 == 1 then c, pos = getvar(blob, pos) end
      t = t + floor(v / 2)
      if t > cut then
        k = k + 1
        ts[k], cs[k] = t, c
      end
    end
    local tombs, nt = {}, 0
    n, pos = getvar(blob, pos)
    for _ = 1, n do
      local x
      x, pos = getvar(blob, pos)
      if x > cut then
        nt = nt + 1
        tombs[nt] = x
      end
    end
    if k > 0 or nt > 0 then
      subs[id] = {ret = ret, ts = ts, cs = cs, tombs = tombs}
      order[#order + 1] = id
    end
  end
  return subs, order
end

-- encode packs the non-empty sub-logs; it returns the string and the
-- latest time any record must be kept until.
local function encode(subs, order)
  local buf, n, parts, expiry = {}, 0, {}, 0
  local function flush()
    local i = 1
    while i <= n do
      local j = math.min(i + 3999, n)
      parts[#parts + 1] = char(unpack(buf, i, j))
      i = j + 1
    end
    buf, n = {}, 0
  end
  for _, id in ipairs(order) do
    local s = subs[id]
    local ts, cs, tombs = s.ts, s.cs, s.tombs
    if #ts > 0 or #tombs > 0 then
      n = putvar(buf, n, #id)
      flush()
      parts[#parts + 1] = id
      n = putvar(buf, n, s.ret / 1000)
      n = putvar(buf, n, #ts)
      local prev = 0
      for i = 1, #ts do
        local d = ts[i] - prev
        prev = ts[i]
        if cs[i] == 1 then
          n = putvar(buf, n, d * 2)
        else
          n = putvar(buf, n, d * 2 + 1)
          n = putvar(buf, n, cs[i])
        end
      end
      n = putvar(buf, n, #tombs)
      local last = ts[#ts] or 0
      for i = 1, #tombs do
        n = putvar(buf, n, tombs[i])
        if tombs[i] > last then last = tombs[i] end
      end
      if last + s.ret > expiry then expiry = last + s.ret end
    end
  end
  flush()
  return table.concat(parts), expiry
end

local function store(key, subs, order, now)
  local blob, expiry = encode(subs, order)
  local ttl = expiry - now + SLACK
  if blob == '' or ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, blob, 'PX', ttl)
  end
end

-- evaluate answers one rule before anything is recorded:
-- used, reset, retry, admits.
local function evaluate(s, limit, window, bounds, cost, now)
  local ts, cs = s.ts, s.cs
  local used = 0
  if window == 0 then
    local start, stop
    for i = 1, 3 do
      if bounds[i] <= now and now < bounds[i + 1] then
        start, stop = bounds[i], bounds[i + 1]
        break
      end
    end
    if not start then
      return redis.error_reply('CLOCKSKEW now ' .. now .. ' is outside the calendar periods sent')
    end
    local i = #ts
    while i >= 1 and ts[i] >= start do
      used = used + cs[i]
      i = i - 1
    end
    if used + cost <= limit then return {used, stop - now, 0, 1} end
    return {used, stop - now, stop - now, 0}
  end
  local cut = now - window
  local first = #ts + 1
  local i = #ts
  while i >= 1 and ts[i] > cut do
    used = used + cs[i]
    first = i
    i = i - 1
  end
  local reset = 0
  if used > 0 then reset = ts[first] + window - now end
  if used + cost <= limit then return {used, reset, 0, 1} end
  local retry = window
  if cost <= limit then
    local need = used + cost - limit
    for j = first, #ts do
      need = need - cs[j]
      if need <= 0 then
        retry = ts[j] + window - now
        break
      end
    end
  end
  return {used, reset, retry, 0}
end

-- record adds an admitted request and returns the time it was recorded at.
local function record(s, now, cost, grain)
  local ts, cs = s.ts, s.cs
  local n = #ts
  local t = now
  if n > 0 and ts[n] >= t then t = ts[n] + 1 end
  if grain > 0 and n > 0 and floor(ts[n] / grain) == floor(t / grain) then
    ts[n] = t
    cs[n] = cs[n] + cost
    return t
  end
  ts[n + 1] = t
  cs[n + 1] = cost
  return t
end

local function oldestIn(s, window, now)
  local cut = now - window
  for _, t in ipairs(s.ts) do
    if t > cut then return t + window - now end
  end
  return 0
end

local function refund(s, t, cost, grain)
  local ts, cs = s.ts, s.cs
  if grain == 0 then
    for i = 1, #ts do
      if ts[i] == t and cs[i] == cost then
        table.remove(ts, i)
        table.remove(cs, i)
        return 1
      end
    end
    return 0
  end
  for _, x in ipairs(s.tombs) do
    if x == t then return 0 end
  end
  for i = 1, #ts do
    if ts[i] >= t and floor(ts[i] / grain) == floor(t / grain) and cs[i] >= cost then
      if cs[i] == cost then
        table.remove(ts, i)
        table.remove(cs, i)
      else
        cs[i] = cs[i] - cost
      end
      s.tombs[#s.tombs + 1] = t
      return 1
    end
  end
  return 0
end

local op = ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end

local keys = {} -- key index -> {subs, order}, decoded once
local function load(ki)
  local k = keys[ki]
  if not k then
    local subs, order = decode(redis.call('GET', KEYS[ki]) or nil, now)
    k = {subs = subs, order = order}
    keys[ki] = k
  end
  return k
end
local function subFor(k, id, create)
  local s = k.subs[id]
  if not s and create then
    s = {ret = 0, ts = {}, cs = {}, tombs = {}}
    k.subs[id] = s
    k.order[#k.order + 1] = id
  end
  return s
end
local EMPTY = {ret = 0, ts = {}, cs = {}, tombs = {}}

local nsec = tonumber(ARGV[3])
local a = 4

local touched = {} -- key index -> true when it must be written back
local function writeBack()
  for ki in pairs(touched) do
    store(KEYS[ki], keys[ki].subs, keys[ki].order, now)
  end
end

-- decideOne decides the decision whose sections start at ARGV[a]; it
-- appends its answer to reply and returns the index after its arguments.
local function decideOne(a, nsec, write, reply)
  local secs = {}
  local admitted = true
  for si = 1, nsec do
    local sec = {ki = tonumber(ARGV[a]), id = ARGV[a + 1], ret = tonumber(ARGV[a + 2]),
      grain = tonumber(ARGV[a + 3]), cost = tonumber(ARGV[a + 4]), rules = {}}
    local nr = tonumber(ARGV[a + 5])
    a = a + 6
    local s = subFor(load(sec.ki), sec.id, false) or EMPTY
    for _ = 1, nr do
      local limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
      local bounds
      a = a + 2
      if window == 0 then
        bounds = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])}
        a = a + 4
      end
      local r = evaluate(s, limit, window, bounds, sec.cost, now)
      if r.err then error(r) end
      if r[4] == 0 then admitted = false end
      sec.rules[#sec.rules + 1] = {window = window, res = r}
    end
    secs[si] = sec
  end
  reply[#reply + 1] = admitted and 1 or 0
  local recorded = admitted and write
  for _, sec in ipairs(secs) do
    local t = 0
    if recorded then
      local s = subFor(load(sec.ki), sec.id, true)
      s.ret = sec.ret
      if sec.cost > 0 then t = record(s, now, sec.cost, sec.grain) end
      for _, r in ipairs(sec.rules) do
        r.res[1] = r.res[1] + sec.cost
        if r.window > 0 then r.res[2] = oldestIn(s, r.window, now) end
      end
      touched[sec.ki] = true
    end
    reply[#reply + 1] = t
  end
  for _, sec in ipairs(secs) do
    for _, r in ipairs(sec.rules) do
      for j = 1, 4 do reply[#reply + 1] = r.res[j] end
    end
  end
  return a
end

if op == 'd' or op == 'p' then
  -- ARGV[3] is the number of decisions; each starts with its section count.
  local reply = {now}
  local ok, err = pcall(function()
    for _ = 1, nsec do
      local n = tonumber(ARGV[a])
      a = decideOne(a + 1, n, op == 'd', reply)
    end
  end)
  if not ok then
    if type(err) == 'table' and err.err then return err end
    error(err)
  end
  writeBack()
  return reply
end

if op == 'r' then
  local given = 0
  for _ = 1, nsec do
    local ki, id = tonumber(ARGV[a]), ARGV[a + 1]
    local grain, t, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    a = a + 5
    local s = subFor(load(ki), id, false)
    if s and refund(s, t, cost, grain) == 1 then
      given = given + 1
      touched[ki] = true
    end
  end
  writeBack()
  return given
end

if op == 'x' then
  local gone = 0
  for _ = 1, nsec do
    local ki, id = tonumber(ARGV[a]), ARGV[a + 1]
    a = a + 2
    local k = load(ki)
    if k.subs[id] then
      k.subs[id] = nil
      gone = gone + 1
      touched[ki] = true
    end
  end
  for ki in pairs(touched) do
    local k = keys[ki]
    local order = {}
    for _, id in ipairs(k.order) do
      if k.subs[id] then order[#order + 1] = id end
    end
    store(KEYS[ki], k.subs, order, now)
  end
  return gone
end

return redis.error_reply('ERR unknown freqcap op ' .. tostring(op))
