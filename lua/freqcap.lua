-- freqcap.lua: one atomic step over the record logs of a group of keys that
-- share a hash tag (on a standalone server, of any keys). It is the
-- algorithm of limiter/internal/recordlog; the differential test holds the
-- two to the same answers.
--
-- KEYS[k]  a log key: a string packing the sub-logs (one per dimension tuple
--          and weight) of one first-dimension value, with struct.pack,
--          little-endian. Times are ms since the epoch, every one exact.
--          Format 3 (this script writes it): a sub-log is the header
--          "<sI3BBBI6": id (zero-terminated), retention in s, shape,
--          the entry count n's low byte, 240 + the gap width w (0 when
--          n < 2, else the fewest bytes, 1 to 6, that hold the widest
--          gap), the newest entry's time (0 when n is 0); then n's high
--          byte when the shape has 32; then the tomb count (I2) when the
--          shape has 16. Then the n-1 gaps from each entry to the next
--          older one, newest first, w bytes each; when weighted (shape
--          4), the n costs, newest first (I4, so at most MAX_COST: a
--          bucket whose sum would pass it takes no more, and the record
--          starts an entry of its own; else every cost is 1); then the
--          tombs, the times of refunded records (I6); then, when the
--          shape has 8, the floor, the newest time a reset forgot (I6).
--          The shape always has 128 + 3, and 64 is reserved (CORRUPT).
--          One width a sub-log lets one C call unpack its gaps, and newest
--          first lets a write prepend a record to the old bytes and prune
--          by cutting the tail. Every admission gets a time later than
--          any the sub-log has held (entries, tombs, floor), so an
--          admission id names one admission, ever.
--          Formats 1 and 2 (read, never written): the header
--          "<sI3BI2I2I6": id, retention in s, flags (1: weighted, 2: has
--          a floor), n, tomb count, newest; gaps of 4 bytes (6 when the
--          retention exceeds 49 days). A sub-log of either layout is told
--          by the byte after the retention: 128 and above is format 3.
--          So readers of formats 1 and 2 refuse format 3: format 2's
--          script refuses flags above 3 (CORRUPT); format 1's reads the
--          shape's 3 as weighted with a floor and a count of at least
--          61,440 (the width byte's 240), and fails reading past the end
--          of any value under 491,000 bytes.
--          Format 2 (exempt marks): a sub-log whose id is "\1e" and then
--          a log's id is that log's annex, not a log: its entries are the
--          record times of the log's exempt records with their exempt
--          units, merged per grain as the log's are. No rule's id starts
--          with "\1" (limiter/internal/recordlog/exempt.go).
--
-- ARGV[1]  op: OP_DECIDE decide and record, OP_DECIDE_ALL decide and
--          record only if every decision of the run is admitted (the
--          entries of one batch send under "all or nothing"), OP_PEEK
--          decide and record nothing, OP_REFUND refund, OP_RESET reset
--          (values below; the Go side names them alike, and a test holds
--          the two equal).
-- OP_DECIDE, OP_DECIDE_ALL, OP_PEEK:
--          numbers come packed (struct, little-endian), because tonumber
--          on strings costs more than the rest of a decision.
--          ARGV[2] the rule specs: "<B" count S, then per spec "<I6I6B"
--          retention ms, grain ms, rule count, and per rule "<I6I6" limit,
--          window ms, followed for a calendar rule (window 0) by "<I6I6I6I6"
--          period starts.
--          ARGV[3] the decisions: "<I2" count D, then per decision "<I6BB"
--          now (0 for the server's TIME), section count, flags (1: exempt:
--          each record it makes is marked in its log's annex), and per
--          section "<I2I2I6" key index, spec index, cost.
--          ARGV[4...] the sections' sub-log ids, in order.
--          Decisions are decided in order, as if one by one: concurrent
--          requests ride in one run.
-- OP_REFUND: ARGV[2] now (0: TIME), ARGV[3] section count, then per
--          section: key index, sub-log id, grain ms, record time, cost.
--          A record refunded takes its units off the exempt mark at its
--          time, if any.
-- OP_RESET: ARGV[2] now (0: TIME), ARGV[3] section count, then per
--          section: key index, sub-log id, keep ms: the records (and
--          exempt marks) made within keep ms before now stay, 0 forgets
--          them all. The log's exempt marks go with its records.
--
-- Reply:
--   OP_DECIDE, OP_DECIDE_ALL, OP_PEEK:
--          per decision: now, admitted 1|0, the record time of each
--          section (0 when nothing was recorded), then per rule: used,
--          reset ms, retry ms (0 when the rule admits). Under
--          OP_DECIDE_ALL with a denial, each decision is answered as it
--          was decided in turn (the ones before it counted), but nothing
--          is written: its record times name nothing.
--   OP_REFUND: the number of sections whose record was given back.
--   OP_RESET: the number of sub-logs forgotten.
-- Errors:  CLOCK_SKEW .. " ..." when now is outside a rule's period starts;
--          CORRUPT .. " ..." for a sub-log of a later layout, or a shape
--          or width this one does not write.

local OP_DECIDE, OP_DECIDE_ALL, OP_PEEK, OP_REFUND, OP_RESET = 'd', 'a', 'p', 'r', 'x'
local CLOCK_SKEW = 'CLOCKSKEW'
local CORRUPT = 'CORRUPT'
local EXEMPT_ANNEX = '\1e' -- prefix of the id of a log's exempt marks
local DECISION_EXEMPT = 1 -- the decisions' flag of an exempt one
local KEY_SLACK = 60000 -- ms a key outlives its last record's retention
local WIDE_RETENTION_S = 4294967 -- retention (s) above which format 1's gaps take 6 bytes
local MAX_ENTRIES = 65535 -- entries or tombs a sub-log can hold (I2 counts)
local MAX_COST = 4294967295 -- units an entry can hold (I4 costs); the gateway sends no larger cost

local sub, floor, rep, concat = string.sub, math.floor, string.rep, table.concat
local spack, sunpack = struct.pack, struct.unpack
local unpack = unpack or table.unpack
-- HEADER starts every sub-log's header; format 3's shape byte has
-- compactShape set, and its gap width byte the high nibble widthMark.
local HEADER = '<sI3BBBI6'
local compactShape, widthMark = 128, 240
local CHUNK = 4000 -- values per pack/unpack call: Lua's C stack is limited

local function gapSize(retS)
  if retS > WIDE_RETENTION_S then return 6 end
  return 4
end

-- unpackN returns n integers of size bytes each from s at pos.
local function unpackN(s, pos, n, size)
  if n <= CHUNK then
    local t = {sunpack('<' .. rep('I' .. size, n), s, pos)}
    t[n + 1] = nil -- struct.unpack also returns the next position
    return t
  end
  local t = {}
  local i = 0
  while i < n do
    local m = math.min(CHUNK, n - i)
    local part = {sunpack('<' .. rep('I' .. size, m), s, pos + i * size)}
    for j = 1, m do t[i + j] = part[j] end
    i = i + m
  end
  return t
end

-- packN packs a[i..j] as integers of size bytes each.
local function packN(a, i, j, size)
  local parts = {}
  while i <= j do
    local k = math.min(i + CHUNK - 1, j)
    parts[#parts + 1] = spack('<' .. rep('I' .. size, k - i + 1), unpack(a, i, k))
    i = k + 1
  end
  return concat(parts)
end

local now0 -- the server's TIME in ms, read once
local function clock(arg)
  local t = tonumber(arg)
  if t ~= 0 then return t end -- only refunds and resets send a string
  if not now0 then
    local tm = redis.call('TIME')
    now0 = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
  end
  return now0
end

-- Keys are loaded once per run. A loaded key lists its sub-logs with their
-- header fields; a sub-log's entries are unpacked only when a section reads
-- it, and the others are copied as they are, or dropped when their newest
-- record has left their retention.
local keys = {}

local function loadKey(ki, now)
  local k = keys[ki]
  if k then return k end
  local blob = redis.call('GET', KEYS[ki]) or ''
  k = {blob = blob, subs = {}, order = {}}
  keys[ki] = k
  local pos, len = 1, #blob
  while pos <= len do
    local id, retS, flags, count, wb, newest, p = sunpack(HEADER, blob, pos)
    local nt, weighted, hasFloor, gsize = 0, false, false, 0
    if flags >= compactShape then
      if flags % 4 ~= 3 or flags >= compactShape + 64 or wb < widthMark or wb > widthMark + 6 then
        error({err = CORRUPT .. ' key ' .. KEYS[ki] .. ': a sub-log of a later layout (shape ' .. flags .. ', width ' .. wb .. ')'})
      end
      gsize = wb - widthMark
      if floor(flags / 32) % 2 == 1 then
        count = count + 256 * sunpack('<B', blob, p)
        p = p + 1
      end
      if floor(flags / 16) % 2 == 1 then nt, p = sunpack('<I2', blob, p) end
      if (count > 1) ~= (gsize > 0) then
        error({err = CORRUPT .. ' key ' .. KEYS[ki] .. ': ' .. count .. ' records with gaps of ' .. gsize .. ' bytes'})
      end
      weighted, hasFloor = floor(flags / 4) % 2 == 1, floor(flags / 8) % 2 == 1
    elseif flags > 3 then
      error({err = CORRUPT .. ' key ' .. KEYS[ki] .. ': a sub-log of a later layout (flags ' .. flags .. ')'})
    else
      -- Format 1's layout, which this version reads and writes no more.
      count, nt, newest, p = sunpack('<I2I2I6', blob, pos + #id + 5)
      gsize, weighted, hasFloor = gapSize(retS), flags % 2 == 1, flags >= 2
    end
    local s = {id = id, ret = retS * 1000, weighted = weighted, count = count, ntombs = nt,
      latest = newest, gsize = gsize, r0 = pos, gpos = p, floor = 0, compact = flags >= compactShape}
    s.cpos = p + math.max(count - 1, 0) * gsize
    s.tpos = s.cpos + (weighted and count * 4 or 0)
    pos = s.tpos + nt * 6
    -- What the sub-log holds besides entries is rare: read it now, as it
    -- decides when the sub-log may go.
    local last = newest
    if nt > 0 then
      for _, x in ipairs(unpackN(blob, s.tpos, nt, 6)) do
        if x > last then last = x end
      end
    end
    if hasFloor then
      s.floor, pos = sunpack('<I6', blob, pos)
      if s.floor > last then last = s.floor end
    end
    s.r1, s.last = pos - 1, last
    if last > now - s.ret then
      k.subs[id] = s
      k.order[#k.order + 1] = id
    end
  end
  return k
end

-- decode unpacks a sub-log's entries into arrays, newest first, dropping
-- what is at or before now-retention. Old entries from s.rawOld on keep
-- their bytes in the blob unchanged, so encode copies them instead of
-- packing them anew; s.added counts the entries prepended since.
local FULL = math.huge
local function decode(k, s, now)
  if s.ts then return s end
  local ts, cs, tombs = {}, {}, {}
  s.ts, s.cs, s.tombs, s.added, s.rawOld, s.kept = ts, cs, tombs, 0, 2, 0
  if not s.r0 then
    s.floor = 0
    return s
  end
  local cut = now - s.ret
  if s.floor <= cut then s.floor = 0 end
  local n = 0
  if s.count > 0 and s.latest > cut then
    local t = s.latest
    n = 1
    ts[1], cs[1] = t, 1
    if s.count > 1 then
      local gaps = unpackN(k.blob, s.gpos, s.count - 1, s.gsize)
      for j = 1, s.count - 1 do
        t = t - gaps[j]
        if t <= cut then break end
        n = n + 1
        ts[n], cs[n] = t, 1
      end
    end
    if s.weighted then
      local c = unpackN(k.blob, s.cpos, n, 4)
      for j = 1, n do cs[j] = c[j] end
    end
  end
  if s.ntombs > 0 then
    for _, x in ipairs(unpackN(k.blob, s.tpos, s.ntombs, 6)) do
      if x > cut then tombs[#tombs + 1] = x end
    end
  end
  s.kept = n
  return s
end

-- forgetBefore drops a decoded sub-log's records and tombs at or before
-- cut and keeps the later ones; the floor becomes the newest time it
-- forgot, unless newer (recordlog.SubLog.ForgetBefore).
local function forgetBefore(s, cut)
  local fl, ts, cs, kts, kcs, kt = s.floor, s.ts, s.cs, {}, {}, {}
  for j = 1, #ts do
    if ts[j] > cut then
      kts[#kts + 1], kcs[#kcs + 1] = ts[j], cs[j]
    elseif ts[j] > fl then
      fl = ts[j]
    end
  end
  for _, x in ipairs(s.tombs) do
    if x > cut then kt[#kt + 1] = x elseif x > fl then fl = x end
  end
  s.floor, s.ts, s.cs, s.tombs, s.rawOld = fl, kts, kcs, kt, FULL
end

-- newest is the latest time a decoded sub-log has held.
local function newest(s)
  local t = s.floor
  if s.ts[1] and s.ts[1] > t then t = s.ts[1] end
  for _, x in ipairs(s.tombs) do
    if x > t then t = x end
  end
  return t
end

local function subFor(k, id, create)
  local s = k.subs[id]
  if not s and create then
    s = {id = id, ret = 0, weighted = false, floor = 0}
    k.subs[id] = s
    k.order[#k.order + 1] = id
  end
  return s
end

local EMPTY = {ts = {}, cs = {}}

-- widthOf is the fewest bytes (at least 1) that hold a gap.
local function widthOf(g)
  local w, lim = 1, 256
  while g >= lim do
    w, lim = w + 1, lim * 256
  end
  return w
end

-- encode returns a decoded sub-log's bytes in format 3: the new and
-- changed newest entries packed anew, the unchanged older ones copied from
-- the blob when their gaps keep their width. The width is the fewest bytes
-- that hold the widest gap: the gaps packed anew tell it, unless they are
-- narrower than the copied ones, whose widest may have been pruned.
local function encode(k, s)
  local ts, cs = s.ts, s.cs
  local n = #ts
  local retS = s.ret / 1000
  local w = s.weighted
  local fresh, rawG, rawC = n, '', ''
  if s.rawOld <= s.kept then fresh = s.added + s.rawOld - 1 end
  local gaps, widest = {}, 0
  for i = 2, fresh do
    local g = ts[i - 1] - ts[i]
    gaps[i - 1] = g
    if g > widest then widest = g end
  end
  local gsize = 0
  if n > 1 then
    gsize = widthOf(widest)
    if fresh < n and gsize < s.gsize then
      for i = fresh + 1, n do
        local g = ts[i - 1] - ts[i]
        if g > widest then widest = g end
      end
      gsize = widthOf(widest)
    end
  end
  if fresh < n and s.gsize == gsize then
    local from, m = s.rawOld, s.kept - s.rawOld + 1
    local g0 = s.gpos + (from - 2) * gsize
    rawG = sub(k.blob, g0, g0 + m * gsize - 1)
    if w then
      local c0 = s.cpos + (from - 1) * 4
      rawC = sub(k.blob, c0, c0 + m * 4 - 1)
    end
  else
    for i = fresh + 1, n do gaps[i - 1] = ts[i - 1] - ts[i] end
    fresh = n
  end
  local tombs = s.tombs
  local shape = compactShape + 3 + (w and 4 or 0) + (s.floor > 0 and 8 or 0) + (#tombs > 0 and 16 or 0) + (n > 255 and 32 or 0)
  local parts = {spack(HEADER, s.id, retS, shape, n % 256, widthMark + gsize, ts[1] or 0)}
  if n > 255 then parts[#parts + 1] = spack('<B', floor(n / 256)) end
  if #tombs > 0 then parts[#parts + 1] = spack('<I2', #tombs) end
  if fresh > 1 then parts[#parts + 1] = packN(gaps, 1, fresh - 1, gsize) end
  parts[#parts + 1] = rawG
  if w and n > 0 then
    parts[#parts + 1] = packN(cs, 1, fresh, 4)
    parts[#parts + 1] = rawC
  end
  if #tombs > 0 then parts[#parts + 1] = packN(tombs, 1, #tombs, 6) end
  if s.floor > 0 then parts[#parts + 1] = spack('<I6', s.floor) end
  return concat(parts)
end

local function writeBack(ki, now)
  local k = keys[ki]
  local parts, expiry = {}, 0
  for _, id in ipairs(k.order) do
    local s = k.subs[id]
    if s then
      if s.ts then
        local last = newest(s)
        if last > 0 then
          parts[#parts + 1] = encode(k, s)
          if last + s.ret > expiry then expiry = last + s.ret end
        end
      elseif s.compact then
        parts[#parts + 1] = sub(k.blob, s.r0, s.r1)
        if s.last + s.ret > expiry then expiry = s.last + s.ret end
      else
        -- A sub-log of format 1's layout is written anew in format 3.
        decode(k, s, now)
        local last = newest(s)
        if last > 0 then
          parts[#parts + 1] = encode(k, s)
          if last + s.ret > expiry then expiry = last + s.ret end
        end
      end
    end
  end
  local blob = concat(parts)
  local ttl = expiry - now + KEY_SLACK
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
-- entry in the window (0 when none is). Entries are newest first. A cost
-- of 0 counts nothing, so it is admitted even past the limit.
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
      return nil, CLOCK_SKEW .. ' now ' .. now .. ' is outside the calendar periods sent'
    end
    local i = 1
    while i <= n and ts[i] >= start do
      used = used + cs[i]
      i = i + 1
    end
    if cost == 0 or used + cost <= limit then return used, stop - now, 0, 0 end
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
  if cost == 0 or used + cost <= limit then return used, reset, 0, last end
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

-- mergeOldest makes room in a sub-log past MAX_ENTRIES entries, which
-- could not be stored (records past every limit that never deny: a shadow
-- rule's, exempt sends'): the oldest two entries whose units fit one become
-- one, at the later one's time, as SubLog.mergeOldest does in Go. Counts
-- are never lower than exact; the merged records can no longer be refunded.
local function mergeOldest(s)
  local ts, cs = s.ts, s.cs
  for i = #ts, 2, -1 do
    if cs[i] + cs[i - 1] <= MAX_COST then
      cs[i - 1] = cs[i - 1] + cs[i]
      table.remove(ts, i)
      table.remove(cs, i)
      noteCost(s, cs[i - 1])
      s.rawOld = FULL
      return
    end
  end
end

-- record adds an admitted request and returns the time it was recorded at:
-- 1 ms after the newest record when that is not earlier than now, so that
-- every admission has a time of its own, but in a bucketed log not past
-- now's bucket: the newest entry's time then, unless that is a tomb's or
-- the floor's (records would otherwise run ahead of the clock past one
-- admission a millisecond); then whether it went into the newest bucket,
-- and whether the oldest entries were merged (mergeOldest). As
-- recordlog.SubLog.Record.
local function record(s, now, cost, grain)
  local ts, cs = s.ts, s.cs
  local t = newest(s) + 1
  if t < now then t = now end
  if grain > 0 and t > now and floor(t / grain) ~= floor(now / grain) and ts[1] == t - 1 then
    local tombed = false
    for _, x in ipairs(s.tombs) do
      if x == t - 1 then tombed = true end
    end
    if not tombed then t = t - 1 end
  end
  if grain > 0 and ts[1] and floor(ts[1] / grain) == floor(t / grain) and cs[1] + cost <= MAX_COST then
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
  if #ts > MAX_ENTRIES then
    mergeOldest(s)
    return t, false, true
  end
  return t, false
end


-- unmark takes cost units off the exempt mark at t, if any: a record
-- refunded was exempt when its time is a mark's.
local function unmark(m, t, cost)
  local ts, cs = m.ts, m.cs
  for i = 1, #ts do
    if ts[i] == t then
      if cs[i] <= cost then
        table.remove(ts, i)
        table.remove(cs, i)
      else
        cs[i] = cs[i] - cost
      end
      m.rawOld = FULL
      return
    end
  end
end

local function refund(s, t, cost, grain, now)
  -- Past MAX_ENTRIES tombs the sub-log could not be stored: refuse the refund.
  if t <= s.floor or t <= now - s.ret or #s.tombs >= MAX_ENTRIES then return 0 end
  for _, x in ipairs(s.tombs) do
    if x == t then return 0 end
  end
  local ts, cs = s.ts, s.cs
  -- Oldest first (ts[1] is the newest): in a bucketed log the record made
  -- at t is in the oldest entry of its bucket whose time is not before t
  -- (a bucket past MAX_COST has several), as recordlog.SubLog.Refund finds
  -- it; a newer entry holds later records, which their own refunds take.
  for i = #ts, 1, -1 do
    local e = ts[i]
    if (grain == 0 and e == t and cs[i] == cost) or
       (grain > 0 and e >= t and floor(e / grain) == floor(t / grain) and cs[i] >= cost) then
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

if op == OP_DECIDE or op == OP_DECIDE_ALL or op == OP_PEEK then
  local write = op ~= OP_PEEK
  local allAdmitted = true
  -- Rule specs, unpacked once per run.
  local sp = ARGV[2]
  local nspec, pos = sunpack('<B', sp, 1)
  local specs = {}
  for i = 1, nspec do
    local ret, grain, nrules
    ret, grain, nrules, pos = sunpack('<I6I6B', sp, pos)
    local spec = {ret = ret, grain = grain, rules = {}}
    for r = 1, nrules do
      local limit, window
      limit, window, pos = sunpack('<I6I6', sp, pos)
      local rule = {limit = limit, window = window}
      if window == 0 then
        local b0, b1, b2, b3
        b0, b1, b2, b3, pos = sunpack('<I6I6I6I6', sp, pos)
        rule.bounds = {b0, b1, b2, b3}
      end
      spec.rules[r] = rule
    end
    specs[i] = spec
  end
  local dp = ARGV[3]
  local ndec
  ndec, pos = sunpack('<I2', dp, 1)
  local idArg = 3 -- ARGV[4...] are the sub-log ids, in section order
  local reply, nr = {}, 0
  local touched, order = {}, {}
  for _ = 1, ndec do
    local now, nsec, dflags
    now, nsec, dflags, pos = sunpack('<I6BB', dp, pos)
    local exempt = dflags % (2 * DECISION_EXEMPT) >= DECISION_EXEMPT
    if now == 0 then now = clock(0) end
    local secs = {}
    local admitted = true
    local base = nr
    nr = nr + 2 + nsec -- now, admitted, record times; rule answers follow
    for si = 1, nsec do
      local ki, specIdx, cost
      ki, specIdx, cost, pos = sunpack('<I2I2I6', dp, pos)
      idArg = idArg + 1
      local id, spec = ARGV[idArg], specs[specIdx]
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
    if not admitted then allAdmitted = false end
    local at = base + 2 + nsec
    for si = 1, nsec do
      local sec = secs[si]
      local rules = sec.spec.rules
      local t = 0
      if admitted and write and sec.cost > 0 then
        local k = keys[sec.ki]
        local s = decode(k, subFor(k, sec.id, true), now)
        s.ret = sec.spec.ret
        local merged, squeezed
        t, merged, squeezed = record(s, now, sec.cost, sec.spec.grain)
        if exempt then
          -- t is no earlier than any mark (marks are times the log
          -- recorded); when its records share t, the mark lands in t's
          -- bucket, where a refund of the record finds it.
          local m = decode(k, subFor(k, EXEMPT_ANNEX .. sec.id, true), now)
          m.ret = sec.spec.ret
          record(m, t, sec.cost, sec.spec.grain)
        end
        for r = 1, #rules do
          local window = rules[r].window
          -- The oldest record in a rolling window is unchanged, unless
          -- this one is the only one (new, or merged into the newest).
          if window > 0 and (reply[at + 1] == 0 or (merged and sec.last[r] == 1)) then
            reply[at + 2] = s.ts[1] + window - now
          elseif window > 0 and squeezed then
            -- The oldest entries merged: the oldest in the window may
            -- be a merged one, later than before.
            local ts = s.ts
            for j = #ts, 1, -1 do
              if ts[j] > now - window then
                reply[at + 2] = ts[j] + window - now
                break
              end
            end
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
  if op == OP_DECIDE_ALL and not allAdmitted then return reply end
  for _, ki in ipairs(order) do writeBack(ki, touched[ki]) end
  return reply
end

if op == OP_REFUND or op == OP_RESET then
  local now = clock(ARGV[2])
  local nsec = tonumber(ARGV[3])
  local a, done, touched = 4, 0, {}
  for _ = 1, nsec do
    local ki, id = tonumber(ARGV[a]), ARGV[a + 1]
    local k = loadKey(ki, now)
    local s = k.subs[id]
    if op == OP_REFUND then
      local grain, t, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      a = a + 5
      if s and refund(decode(k, s, now), t, cost, grain, now) == 1 then
        done = done + 1
        touched[ki] = true
        local m = k.subs[EXEMPT_ANNEX .. id]
        if m then unmark(decode(k, m, now), t, cost) end
      end
    else
      local keep = tonumber(ARGV[a + 2])
      a = a + 3
      if s then
        -- Forget the records (those at or before now - keep), keeping
        -- the floor: the newest time forgotten (see the header).
        decode(k, s, now)
        if keep > 0 then
          forgetBefore(s, now - keep)
        else
          s.floor = newest(s)
          s.ts, s.cs, s.tombs, s.rawOld = {}, {}, {}, FULL
        end
        done = done + 1
        touched[ki] = true
        local m = k.subs[EXEMPT_ANNEX .. id]
        if m then
          decode(k, m, now)
          if keep > 0 then
            local fl = m.floor
            forgetBefore(m, now - keep)
            m.floor = fl
          else
            m.ts, m.cs, m.tombs, m.rawOld = {}, {}, {}, FULL
          end
        end
      end
    end
  end
  for ki in pairs(touched) do writeBack(ki, now) end
  return done
end

return redis.error_reply('ERR unknown freqcap op ' .. tostring(op))
