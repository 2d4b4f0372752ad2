-- freqcap.lua: one atomic step over the record logs of a group of keys that
-- share a hash tag (on a standalone server, of any keys). It is the
-- algorithm of limiter/log.go; the differential test holds the two to the
-- same answers.
--
-- KEYS[k]  a log key: a string packing the sub-logs (one per dimension tuple
--          and weight) of one first-dimension value. Times are ms since the
--          epoch. A sub-log is: varint id length, id, varint header
--          (retention in s * 4 + weighted * 2 + has-tombs), varint body
--          length, body. The body is: varint entry count; when has-tombs, a
--          varint count and the absolute times of records refunded from
--          buckets; then the entries newest first: the newest as its
--          absolute time, each older one as the gap to its newer neighbour.
--          In a weighted sub-log each time or gap v is written v*2+1 and
--          followed by the entry's cost when the cost is not 1, else v*2;
--          in an unweighted one every cost is 1 and v is written as is.
--          Newest first lets a new record be prepended to the old bytes,
--          and pruning is a cut of the tail.
--
-- ARGV[1]  op: "d" decide and record, "p" peek (decide, record nothing),
--          "r" refund, "x" reset.
-- d, p:    ARGV[2] is the number of rule specs S, then S specs: space-
--          separated "retention_ms grain_ms rule_count" and per rule
--          "limit window_ms" and, for a calendar rule (window 0), four
--          period starts. Then the number of decisions D; each is: now (0
--          for the server's TIME), section count, then per section: key
--          index, sub-log id, spec index, cost. Decisions are decided in
--          order, as if one by one: concurrent requests ride in one run.
-- r:       ARGV[2] now (0: TIME), ARGV[3] section count, then per section:
--          key index, sub-log id, grain ms, record time, cost.
-- x:       ARGV[2] now (0: TIME), ARGV[3] section count, then per section:
--          key index, sub-log id.
--
-- Reply:
--   d, p:  per decision: now, admitted 1|0, the record time of each
--          section (0 when nothing was recorded), then per rule: used,
--          reset ms, retry ms (0 when the rule admits).
--   r:     the number of sections whose record was given back.
--   x:     the number of sub-logs forgotten.
-- Errors:  "CLOCKSKEW ..." when now is outside a rule's period starts.

local byte, char, sub, floor = string.byte, string.char, string.sub, math.floor
local unpack = unpack or table.unpack
local concat = table.concat
local SLACK = 60000 -- a key outlives its last record's retention by this

-- Varints: 7 bits a byte, least significant first, high bit = more.
local function getvarS(s, i)
  local x = byte(s, i)
  if x < 128 then return x, i + 1 end
  local v, m = x - 128, 128
  i = i + 1
  while true do
    x = byte(s, i)
    i = i + 1
    if x < 128 then return v + x * m, i end
    v = v + (x - 128) * m
    m = m * 128
  end
end

local function getvar(b, i)
  local x = b[i]
  if x < 128 then return x, i + 1 end
  local v, m = x - 128, 128
  i = i + 1
  while true do
    x = b[i]
    i = i + 1
    if x < 128 then return v + x * m, i end
    v = v + (x - 128) * m
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

-- bytes returns s[i..j] as a table of numbers, in chunks: Lua's C stack is
-- limited.
local function bytes(s, i, j)
  if j - i < 4000 then return {byte(s, i, j)} end
  local t, n = {}, 0
  while i <= j do
    local k = math.min(i + 3999, j)
    local part = {byte(s, i, k)}
    for x = 1, #part do t[n + x] = part[x] end
    n = n + #part
    i = k + 1
  end
  return t
end

local function tostr(buf, n)
  if n < 4000 then return char(unpack(buf, 1, n)) end
  local parts, i = {}, 1
  while i <= n do
    local j = math.min(i + 3999, n)
    parts[#parts + 1] = char(unpack(buf, i, j))
    i = j + 1
  end
  return concat(parts)
end

local now0 -- the server's TIME in ms, read once
local function clock(arg)
  local t = tonumber(arg)
  if t ~= 0 then return t end
  if not now0 then
    local tm = redis.call('TIME')
    now0 = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
  end
  return now0
end

-- Keys are loaded once per run. A loaded key lists its sub-logs with their
-- header fields; a sub-log's body is decoded only when a section reads it.
local keys = {}

local function loadKey(ki, now)
  local k = keys[ki]
  if k then return k end
  local blob = redis.call('GET', KEYS[ki]) or ''
  k = {blob = blob, subs = {}, order = {}, dirty = false}
  keys[ki] = k
  local pos, len = 1, #blob
  while pos <= len do
    local r0 = pos
    local n, hdr, blen
    n, pos = getvarS(blob, pos)
    local id = sub(blob, pos, pos + n - 1)
    pos = pos + n
    hdr, pos = getvarS(blob, pos)
    blen, pos = getvarS(blob, pos)
    local s = {id = id, ret = floor(hdr / 4) * 1000, weighted = floor(hdr / 2) % 2 == 1,
      hasTombs = hdr % 2 == 1, r0 = r0, b0 = pos, b1 = pos + blen - 1}
    pos = pos + blen
    -- The newest entry tells whether anything is left to keep.
    local count, p = getvarS(blob, s.b0)
    if count > 0 and s.hasTombs then
      local nt
      nt, p = getvarS(blob, p)
      for _ = 1, nt do
        local _x
        _x, p = getvarS(blob, p)
      end
    end
    if count > 0 then
      local v = getvarS(blob, p)
      s.latest = s.weighted and floor(v / 2) or v
    end
    if count > 0 and s.latest > now - s.ret then
      k.subs[id] = s
      k.order[#k.order + 1] = id
    else
      k.dirty = true
    end
  end
  return k
end

-- decode reads a sub-log's body into arrays, newest first, dropping what
-- is at or before now-retention. Old entries from s.rawOld on keep their
-- bytes in the blob unchanged, so encode copies them instead of writing
-- them anew (off2 and off3 are where old entries 2 and 3 start); s.added
-- counts the entries prepended since.
local FULL = math.huge
local function decode(k, s, now)
  if s.ts then return s end
  local ts, cs, tombs = {}, {}, {}
  s.ts, s.cs, s.tombs, s.added, s.rawOld, s.kept = ts, cs, tombs, 0, 2, 0
  if not s.b0 then return s end
  local b = bytes(k.blob, s.b0, s.b1)
  local cut = now - s.ret
  local count, i = getvar(b, 1)
  if s.hasTombs then
    local nt
    nt, i = getvar(b, i)
    for _ = 1, nt do
      local x
      x, i = getvar(b, i)
      if x > cut then tombs[#tombs + 1] = x end
    end
  end
  local t, w, n = 0, s.weighted, 0
  local tail = i
  for j = 1, count do
    local start = i
    local c = 1
    -- getvar, inlined: this loop runs for every record of every decision
    local v = b[i]
    i = i + 1
    if v >= 128 then
      v = v - 128
      local m = 128
      while true do
        local x = b[i]
        i = i + 1
        if x < 128 then
          v = v + x * m
          break
        end
        v = v + (x - 128) * m
        m = m * 128
      end
    end
    if w then
      if v % 2 == 1 then c, i = getvar(b, i) end
      v = floor(v / 2)
    end
    if j == 1 then t = v else t = t - v end
    if t <= cut then break end
    n = n + 1
    ts[n], cs[n] = t, c
    if j == 2 then s.off2 = start elseif j == 3 then s.off3 = start end
    tail = i
  end
  s.kept, s.tailEnd = n, tail
  return s
end

local function subFor(k, id, create)
  local s = k.subs[id]
  if not s and create then
    s = {id = id, ret = 0, weighted = false}
    k.subs[id] = s
    k.order[#k.order + 1] = id
  end
  return s
end

local EMPTY = {ts = {}, cs = {}}

-- encode returns a decoded sub-log's bytes: the new and changed newest
-- entries written anew, the unchanged older ones copied from the blob.
local function encode(k, s)
  local ts, cs = s.ts, s.cs
  local n = #ts
  local raw, fresh = '', n
  if s.rawOld <= s.kept then
    local from = s.rawOld == 2 and s.off2 or s.rawOld == 3 and s.off3
    if from then
      raw = sub(k.blob, s.b0 + from - 1, s.b0 + s.tailEnd - 2)
      fresh = s.added + s.rawOld - 1
    end
  end
  local body, m = {}, 0
  m = putvar(body, m, n)
  local tombs = s.tombs
  if #tombs > 0 then
    m = putvar(body, m, #tombs)
    for i = 1, #tombs do m = putvar(body, m, tombs[i]) end
  end
  local w = s.weighted
  for i = 1, fresh do
    local v = ts[i]
    if i > 1 then v = ts[i - 1] - v end
    if w then
      if cs[i] == 1 then
        m = putvar(body, m, v * 2)
      else
        m = putvar(body, m, v * 2 + 1)
        m = putvar(body, m, cs[i])
      end
    else
      m = putvar(body, m, v)
    end
  end
  local hb, h = {}, 0
  h = putvar(hb, h, #s.id)
  local head = tostr(hb, h)
  hb, h = {}, 0
  h = putvar(hb, h, (s.ret / 1000) * 4 + (w and 2 or 0) + (#tombs > 0 and 1 or 0))
  h = putvar(hb, h, m + #raw)
  for i = 1, m do hb[h + i] = body[i] end
  return head .. s.id .. tostr(hb, h + m) .. raw
end

local function writeBack(ki, now)
  local k = keys[ki]
  local parts, expiry = {}, 0
  for _, id in ipairs(k.order) do
    local s = k.subs[id]
    if s then
      if s.ts then
        if #s.ts > 0 then
          parts[#parts + 1] = encode(k, s)
          local last = s.ts[1]
          for _, x in ipairs(s.tombs) do
            if x > last then last = x end
          end
          if last + s.ret > expiry then expiry = last + s.ret end
        end
      else
        parts[#parts + 1] = sub(k.blob, s.r0, s.b1)
        if s.latest + s.ret > expiry then expiry = s.latest + s.ret end
      end
    end
  end
  local blob = concat(parts)
  local ttl = expiry - now + SLACK
  if blob == '' or ttl <= 0 then
    redis.call('DEL', KEYS[ki])
  else
    redis.call('SET', KEYS[ki], blob, 'PX', ttl)
  end
end

-- noteCost marks a sub-log weighted when it gets a cost other than 1:
-- every entry must then be written anew with its flag.
local function noteCost(s, c)
  if c ~= 1 and not s.weighted then
    s.weighted = true
    s.rawOld = FULL
  end
end

-- evaluate answers one rule before anything is recorded: used, reset,
-- retry (0 when it admits) and, for a rolling rule, the index of the oldest
-- entry in the window (0 when none is). Entries are newest first.
local function evaluate(s, limit, window, bounds, cost, now)
  local ts, cs = s.ts, s.cs
  local n = #ts
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
      return nil, 'CLOCKSKEW now ' .. now .. ' is outside the calendar periods sent'
    end
    local i = 1
    while i <= n and ts[i] >= start do
      used = used + cs[i]
      i = i + 1
    end
    if used + cost <= limit then return used, stop - now, 0, 0 end
    return used, stop - now, stop - now, 0
  end
  local cut = now - window
  local last = 0
  local i = 1
  while i <= n and ts[i] > cut do
    used = used + cs[i]
    last = i
    i = i + 1
  end
  local reset = 0
  if used > 0 then reset = ts[last] + window - now end
  if used + cost <= limit then return used, reset, 0, last end
  local retry = window
  if cost <= limit then
    local need = used + cost - limit
    for j = last, 1, -1 do
      need = need - cs[j]
      if need <= 0 then
        retry = ts[j] + window - now
        break
      end
    end
  end
  return used, reset, retry, last
end

-- record adds an admitted request and returns the time it was recorded at:
-- 1 ms after the newest record when that is not earlier than now, so that
-- every admission has a time of its own.
local function record(s, now, cost, grain)
  local ts, cs = s.ts, s.cs
  local t = now
  if ts[1] and ts[1] >= t then t = ts[1] + 1 end
  if grain > 0 and ts[1] and floor(ts[1] / grain) == floor(t / grain) then
    ts[1] = t
    cs[1] = cs[1] + cost
    noteCost(s, cs[1])
    -- The gap from old entry 2 changes when ts[1] is old entry 1.
    if s.added == 0 and s.rawOld < 3 then s.rawOld = 3 end
    return t, true
  end
  table.insert(ts, 1, t)
  table.insert(cs, 1, cost)
  s.added = s.added + 1
  noteCost(s, cost)
  return t, false
end

local function refund(s, t, cost, grain)
  local ts, cs = s.ts, s.cs
  if grain == 0 then
    for i = 1, #ts do
      if ts[i] == t and cs[i] == cost then
        table.remove(ts, i)
        table.remove(cs, i)
        s.rawOld = FULL
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
      s.rawOld = FULL
      return 1
    end
  end
  return 0
end

local op = ARGV[1]

if op == 'd' or op == 'p' then
  local write = op == 'd'
  -- Rule specs, parsed once per run.
  local nspec = tonumber(ARGV[2])
  local specs = {}
  for i = 1, nspec do
    local f, n = {}, 0
    for x in string.gmatch(ARGV[2 + i], '%S+') do
      n = n + 1
      f[n] = tonumber(x)
    end
    local spec = {ret = f[1], grain = f[2], rules = {}}
    local j = 4
    for r = 1, f[3] do
      local rule = {limit = f[j], window = f[j + 1]}
      j = j + 2
      if rule.window == 0 then
        rule.bounds = {f[j], f[j + 1], f[j + 2], f[j + 3]}
        j = j + 4
      end
      spec.rules[r] = rule
    end
    specs[i] = spec
  end
  local a = 3 + nspec
  local ndec = tonumber(ARGV[a])
  a = a + 1
  local reply, nr = {}, 0
  local touched, order = {}, {}
  for _ = 1, ndec do
    local now = clock(ARGV[a])
    local nsec = tonumber(ARGV[a + 1])
    a = a + 2
    local secs = {}
    local admitted = true
    local base = nr
    nr = nr + 2 + nsec -- now, admitted, record times; rule answers follow
    for si = 1, nsec do
      local ki, id, spec, cost = tonumber(ARGV[a]), ARGV[a + 1], specs[tonumber(ARGV[a + 2])], tonumber(ARGV[a + 3])
      a = a + 4
      local k = loadKey(ki, now)
      local s = subFor(k, id, false)
      if s then decode(k, s, now) else s = EMPTY end
      local sec = {ki = ki, id = id, spec = spec, cost = cost, last = {}}
      secs[si] = sec
      local rules = spec.rules
      for r = 1, #rules do
        local rule = rules[r]
        local used, reset, retry, last = evaluate(s, rule.limit, rule.window, rule.bounds, cost, now)
        if not used then return redis.error_reply(reset) end
        if retry > 0 then admitted = false end
        reply[nr + 1], reply[nr + 2], reply[nr + 3] = used, reset, retry
        sec.last[r] = last
        nr = nr + 3
      end
    end
    reply[base + 1], reply[base + 2] = now, admitted and 1 or 0
    local at = base + 2 + nsec
    for si = 1, nsec do
      local sec = secs[si]
      local rules = sec.spec.rules
      local t = 0
      if admitted and write and sec.cost > 0 then
        local k = keys[sec.ki]
        local s = decode(k, subFor(k, sec.id, true), now)
        s.ret = sec.spec.ret
        local merged
        t, merged = record(s, now, sec.cost, sec.spec.grain)
        for r = 1, #rules do
          local window = rules[r].window
          -- The oldest record in a rolling window is unchanged, unless
          -- this one is the only one (new, or merged into the newest).
          if window > 0 and (reply[at + 1] == 0 or (merged and sec.last[r] == 1)) then
            reply[at + 2] = s.ts[1] + window - now
          end
          reply[at + 1] = reply[at + 1] + sec.cost
          at = at + 3
        end
        if not touched[sec.ki] then
          touched[sec.ki] = now
          order[#order + 1] = sec.ki
        end
      else
        at = at + 3 * #rules
      end
      reply[base + 2 + si] = t
    end
  end
  for _, ki in ipairs(order) do writeBack(ki, touched[ki]) end
  return reply
end

if op == 'r' or op == 'x' then
  local now = clock(ARGV[2])
  local nsec = tonumber(ARGV[3])
  local a, done, touched = 4, 0, {}
  for _ = 1, nsec do
    local ki, id = tonumber(ARGV[a]), ARGV[a + 1]
    local k = loadKey(ki, now)
    local s = k.subs[id]
    if op == 'r' then
      local grain, t, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      a = a + 5
      if s and refund(decode(k, s, now), t, cost, grain) == 1 then
        done = done + 1
        touched[ki] = true
      end
    else
      a = a + 2
      if s then
        k.subs[id] = nil
        done = done + 1
        touched[ki] = true
      end
    end
  end
  for ki in pairs(touched) do writeBack(ki, now) end
  return done
end

return redis.error_reply('ERR unknown freqcap op ' .. tostring(op))
