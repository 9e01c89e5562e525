-- channel.lua: task.channel and its Channel objects, FIFOs between tasks,
-- written on the binding's primitives and on prelude.lua. May use the
-- module's functions, the internals and the prelude it is run with,
-- captured when it loads (prelude.lua says why).
local M, I, P = ...

local current = M.current
local suspend, wake, metatable = I.suspend, I.wake, I.metatable
local type, error, pcall, setmetatable, ipairs = type, error, pcall, setmetatable, ipairs
local format, math_type, huge = string.format, math.type, math.huge
local argerror, number_text = P.argerror, P.number_text

-- A FIFO of records with removal by marking (cancelled waiters are skipped).
local function queue() return {first = 1, last = 0} end
local function push(q, v) q.last = q.last + 1; q[q.last] = v end
local function unshift(q, v) q.first = q.first - 1; q[q.first] = v end
local function shift(q)
  if q.first > q.last then return nil end
  local v = q[q.first]
  q[q.first] = nil
  q.first = q.first + 1
  return v
end
local function qlen(q) return q.last - q.first + 1 end
-- The next record still waiting, or nil.
local function next_waiting(q)
  while true do
    local r = shift(q)
    if r == nil or r.state == "waiting" then return r end
  end
end

local ChannelMethods = {}
local Channel = {__index = ChannelMethods, __name = "lunaloop.Channel",
  __metatable = "lunaloop.Channel"}

--- task.channel([capacity]) -> Channel: a FIFO between tasks. No capacity:
-- unbounded; 0: a rendezvous (send waits for a receiver).
function M.channel(capacity)
  if capacity ~= nil then
    if math_type(capacity) ~= "integer" or capacity < 0 then
      local got = type(capacity) == "number" and number_text(capacity) or type(capacity)
      argerror("channel", 1, "expected a non-negative integer capacity, got " .. got)
    end
  else
    capacity = huge
  end
  return setmetatable({cap = capacity, buf = queue(), recvq = queue(), sendq = queue(),
    closed = false}, Channel)
end

local function check_channel(ch, fname)
  if metatable(ch) ~= Channel then argerror(fname, 1, "expected a Channel (use ch:" .. fname .. ")", 3) end
end

-- Hands v to the first waiting receiver; false when none waits.
local function deliver(ch, v)
  local r = next_waiting(ch.recvq)
  if r == nil then return false end
  r.state, r.value = "delivered", v
  wake(r.task)
  return true
end

--- ch:send(v): puts v in the channel; awaits while a bounded channel is full
-- (a rendezvous waits for a receiver). Raises on a closed channel, also when
-- the channel is closed while waiting. v must not be nil.
function ChannelMethods:send(v)
  check_channel(self, "send")
  if v == nil then argerror("send", 2, "channel values cannot be nil") end
  if self.closed then error("send on a closed channel", 2) end
  if deliver(self, v) then return end
  if qlen(self.buf) < self.cap then push(self.buf, v); return end
  I.check_await("channel:send", 2)
  local rec = {task = current(), value = v, state = "waiting"}
  push(self.sendq, rec)
  local ok, err = pcall(suspend, "channel:send")
  if rec.state == "taken" then
    if not ok then error(err, 0) end
    return
  end
  -- Cancelled (or interrupted) after the channel was closed, before it
  -- resumed: the cancellation wins, as it does over a value taken.
  if ok and rec.state == "closed" then error("send on a closed channel", 2) end
  rec.state = "cancelled"
  error(err, 0)
end

--- ch:receive() -> v | nil, "closed": takes the oldest value; awaits while
-- the channel is empty. Once closed and drained it returns nil, "closed".
function ChannelMethods:receive()
  check_channel(self, "receive")
  if qlen(self.buf) > 0 then
    local v = shift(self.buf)
    local s = next_waiting(self.sendq)
    if s then
      push(self.buf, s.value)
      s.state = "taken"
      wake(s.task)
    end
    return v
  end
  local s = next_waiting(self.sendq)
  if s then
    s.state = "taken"
    wake(s.task)
    return s.value
  end
  if self.closed then return nil, "closed" end
  I.check_await("channel:receive", 2)
  local rec = {task = current(), state = "waiting"}
  push(self.recvq, rec)
  local ok, err = pcall(suspend, "channel:receive")
  if ok and rec.state == "delivered" then return rec.value end
  if ok and rec.state == "closed" then return nil, "closed" end
  if rec.state == "delivered" then
    -- A value was handed to us but we were cancelled before we resumed:
    -- it goes to the next receiver, or back to the front of the buffer.
    local v = rec.value
    rec.value = nil
    if not deliver(self, v) then unshift(self.buf, v) end
  end
  rec.state = "cancelled"
  error(err, 0)
end

--- ch:close(): no more sends. Waiting receivers get nil, "closed"; waiting
-- senders raise. Buffered values can still be received.
function ChannelMethods:close()
  check_channel(self, "close")
  if self.closed then return end
  self.closed = true
  for _, q in ipairs({self.recvq, self.sendq}) do
    while true do
      local r = next_waiting(q)
      if r == nil then break end
      r.state = "closed"
      wake(r.task)
    end
  end
end

--- ch:len() -> values buffered; ch:is_closed() -> boolean.
function ChannelMethods:len()
  check_channel(self, "len")
  return qlen(self.buf)
end
function ChannelMethods:is_closed()
  check_channel(self, "is_closed")
  return self.closed
end
function Channel:__tostring()
  return format("Channel(%d buffered%s)", qlen(self.buf), self.closed and ", closed" or "")
end
