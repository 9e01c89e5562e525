---@meta lunaloop
-- types.lua: LuaLS (lua-language-server) definitions for the `task` module
-- (require "lunaloop", the global `task` of `lunaloop run` and of mods) and
-- the `mods` module of mods. Not loaded at run time: point your editor at
-- it, e.g. in .luarc.json: { "workspace.library": ["<lunaloop>/lua/lunaloop"] }.
-- Installed, it is PREFIX/share/lunaloop/types.lua (/usr/share/lunaloop with
-- the Debian package; `luarocks show --rock-dir lunaloop`/share/lunaloop for
-- the rock).
-- docs/api.md is the reference; docs/modding.md covers the mods API.

---@alias lunaloop.Timing
---| "Initialization" | "LastInitialization"
---| "EarlyUpdate" | "LastEarlyUpdate"
---| "FixedUpdate" | "LastFixedUpdate"
---| "PreUpdate" | "LastPreUpdate"
---| "Update" | "LastUpdate"
---| "PreLateUpdate" | "LastPreLateUpdate"
---| "PostLateUpdate" | "LastPostLateUpdate"
---| "TimeUpdate" | "LastTimeUpdate"

---@alias lunaloop.Clock "scaled" | "unscaled" | "realtime" | "fixed"

---@alias lunaloop.Status "running" | "suspended" | "done" | "failed" | "cancelled"

---@alias lunaloop.Awaitable lunaloop.Task | lunaloop.Promise | lunaloop.Signal

---A task: a coroutine run by the scheduler, and the task is that coroutine:
---type(t) == "thread", coroutine.running() in its code is t. The methods live in
---the (protected) metatable of threads; on a plain coroutine each raises "not a
---task". Alive while not settled; a settled task keeps its status, results,
---name and id for as long as the thread lives.
---@class lunaloop.Task: thread
---@field name string? settable; used in reports and tostring
---@field id integer creation number in this Lua state, from 1
---@overload fun(): nil
local Task = {}
---@return lunaloop.Status
function Task:status() end
---pcall-shaped: true, ... when done; false, err when failed or cancelled. Raises if not settled.
---@return boolean ok
---@return any ...
function Task:result() end
---@return string? traceback the traceback of a failed task
function Task:traceback() end
---Cancels the task (to-be-closed variables run); returns after it unwound.
function Task:cancel() end
---task.await(t): waits until the task settles; its results, or its error raised.
---@return any ...
function Task:await() end
---Its failure will be taken later (task.await, t:await(), t:result()): if it fails
---while nobody awaits it, the failure waits for that call instead of being reported
---(reported when the run ends if nothing took it). Mark it before it can fail.
---@return lunaloop.Task self
function Task:handled() end
---@class lunaloop.TaskInfo
---@field id integer
---@field name string?
---@field status lunaloop.Status
---@field wait ("start"|"yield"|"timer"|"predicate"|"task"|"external"|"ready")?
---@field timing lunaloop.Timing?
---@field deadline number? seconds on its clock, or a frame number
---@field clock ("frame"|lunaloop.Clock)?
---@field waits_on (lunaloop.Task|lunaloop.Promise|lunaloop.Group|string)? the Task awaited, or in an external wait the Promise or the call's name ("task.when_all", "channel:receive", ...), or the Group whose clock it waits on
---@field where string? "source:line" of the await the task is suspended in, in its own code
---@field created_frame integer
---@field age integer frames since creation
---@field traceback string? where it was created (task.debug{creation_traceback = true})
---@return lunaloop.TaskInfo
function Task:info() end

---A host promise (lunaloop/promise.h), completed by a host thread.
---@class lunaloop.Promise
local Promise = {}
---@return "pending"|"done"|"failed"|"cancelled"
function Promise:status() end
---@return boolean ok
---@return any ...
function Promise:result() end
function Promise:cancel() end

---A task.on / task.every registration.
---@class lunaloop.Handle
local Handle = {}
---Stops the callback (also from its own call); a second call does nothing.
function Handle:remove() end
---@return boolean
function Handle:active() end

---A structured-concurrency scope (task.scope).
---@class lunaloop.Scope
local Scope = {}
---Starts a child task now, like task.spawn; raises once the scope failed or ended.
---@param fn async fun(...): ...
---@param ... any
---@return lunaloop.Task
function Scope:spawn(fn, ...) end

---A FIFO between tasks (task.channel).
---@class lunaloop.Channel
local Channel = {}
---An await: waits while the channel is full; raises once closed.
---@param v any
function Channel:send(v) end
---An await: waits while empty; returns nil, "closed" once closed and drained.
---@return any value
---@return "closed"? closed
function Channel:receive() end
---Wakes waiting receivers with nil, "closed"; raises in waiting senders.
function Channel:close() end
---@return integer
function Channel:len() end
---@return boolean
function Channel:is_closed() end

---@class lunaloop.EveryOptions
---@field timing lunaloop.Timing? default "Update"
---@field clock lunaloop.Clock? default "scaled"
---@field spread boolean? stagger callbacks started together over one interval
---@field priority integer|"high"? lower runs first; "high" is never deferred by a budget

---@class lunaloop.OnOptions
---@field priority integer|"high"? lower runs first (default 0); "high" is never deferred by a budget

---@class lunaloop.RunOptions
---@field hz number? frames per second, default 60
---@field fast boolean? virtual time, frames back to back
---@field frames integer? stop after this many frames

---@class lunaloop.TimingStats
---@field queued integer
---@field timers integer
---@field items integer
---@field resumes integer task resumes at this timing in the current frame
---@field deferred integer
---@field budget_exceeded integer
---@field budget number seconds, 0: none
---@field time number? seconds spent (task.debug{profile = true})

---What the collector pacer did for this state (task.gc), since pacing began.
---@class lunaloop.GcStats
---@field steps integer paced and idle steps (incremental basic steps, or minor collections)
---@field cycles integer incremental cycles those steps completed
---@field full_collections integer full collections the pacer ran (the ceiling)
---@field time number seconds spent in all of the above, on the loop's cost clock
---@field longest_step number seconds of the longest single step
---@field bytes integer bytes the state uses now
---@field ceiling_hits integer times the heap was found above the ceiling

---@class lunaloop.GcOptions
---@field budget number? seconds of collector work per frame at `timing` (default 0: none)
---@field timing lunaloop.Timing? default "LastTimeUpdate", the end of the frame; not "Initialization"
---@field ceiling integer? bytes in use above which one full collection runs (default 0: none)
---@field stop_auto boolean? stop Lua's automatic collector (needs a budget or idle)
---@field idle boolean? also step in the time the driver would sleep before the next frame
---@field mode "incremental"|"generational"? the collector's mode, set by this call (default "incremental")
---@field frame number? seconds: the frame time to fill; a frame past `frame - budget` gets what is left, at least budget / 4 (default 0: off; needs a budget)

---@class lunaloop.GcSettings
---@field budget number
---@field timing lunaloop.Timing
---@field ceiling integer
---@field stop_auto boolean
---@field idle boolean
---@field mode "incremental"|"generational"
---@field frame number seconds, 0 when off
---@field own boolean whether the settings are this state's (else the loop's, or none)

---@class lunaloop.Stats
---@field gc lunaloop.GcStats
---@field frame integer
---@field tasks integer
---@field callbacks integer
---@field errors integer
---@field fixed_steps integer
---@field dropped_fixed_steps integer
---@field outside_resumes integer
---@field timings table<lunaloop.Timing, lunaloop.TimingStats>
---@field frames lunaloop.FrameStats the last profiled frames' cost

---Seconds of the last profiled frames (at most 128; nearest rank).
---@class lunaloop.FrameCost
---@field p50 number?
---@field p99 number?
---@field max number?

---@class lunaloop.FrameStats: lunaloop.FrameCost
---@field count integer frames counted (0: none was profiled; no other field)
---@field timings table<lunaloop.Timing, lunaloop.FrameCost>?

---The lunaloop module: `local task = require "lunaloop"`.
---@class lunaloop
---@field timings lunaloop.Timing[] the 16 timings in frame order
---@field version string "MAJOR.MINOR.PATCH" of the loaded module
---@field workers lunaloop.Workers worker Lua states (docs/workers.md)
local task = {}

---Creates a task and runs it now until its first await.
---@param fn async fun(...): ...
---@param ... any
---@return lunaloop.Task
function task.spawn(fn, ...) end

---Creates a task that starts at the next run of Update.
---@param fn async fun(...): ...
---@param ... any
---@return lunaloop.Task
function task.defer(fn, ...) end

---Creates a task that starts at the next run of `timing`.
---@param timing lunaloop.Timing
---@param fn async fun(...): ...
---@param ... any
---@return lunaloop.Task
function task.spawn_at(timing, fn, ...) end

---An await: resumes at the next run of `timing` (default "Update").
---@async
---@param timing lunaloop.Timing?
function task.yield(timing) end

---An await: resumes at the first run of `timing` in a later frame.
---@async
---@param timing lunaloop.Timing?
function task.next_frame(timing) end

---An await: resumes at the first run of `timing` whose frame is >= frame() + n.
---@async
---@param n integer
---@param timing lunaloop.Timing?
function task.delay_frame(n, timing) end

---An await: resumes once `seconds` have passed on `clock` (default "scaled").
---@async
---@param seconds number
---@param timing lunaloop.Timing?
---@param clock lunaloop.Clock?
function task.delay(seconds, timing, clock) end

---An await: calls pred at each run of `timing` (from the next one) until it returns true.
---@async
---@param pred fun(): boolean
---@param timing lunaloop.Timing?
function task.wait_until(pred, timing) end

---An await: calls pred at each run of `timing` (from the next one) until it returns false.
---@async
---@param pred fun(): boolean
---@param timing lunaloop.Timing?
function task.wait_while(pred, timing) end

---An await: the results of a Task or Promise, or raises its error; for a
---Signal, the values of its next fire.
---@async
---@param t lunaloop.Awaitable
---@return any ...
function task.await(t) end

---Cancels a task: its coroutine is closed (to-be-closed variables run).
---@param t lunaloop.Task
function task.cancel(t) end

---@return lunaloop.Task? current the task running now
function task.current() end

---Calls fn(dt) at each run of `timing` (default "Update") from the next run on.
---The timing may come first or right after the function: task.on(fn, "FixedUpdate").
---@param timing lunaloop.Timing|fun(dt: number)
---@param fn? fun(dt: number)
---@param opts? lunaloop.OnOptions
---@return lunaloop.Handle
---@overload fun(fn: fun(dt: number), timing?: lunaloop.Timing, opts?: lunaloop.OnOptions): lunaloop.Handle
function task.on(timing, fn, opts) end

---Calls fn(n) every `interval` seconds; the k-th call is due at start + k * interval.
---The timing is argument 3 or opts.timing (not both).
---@param interval number
---@param fn fun(n: integer)
---@param opts lunaloop.EveryOptions?
---@return lunaloop.Handle
---@overload fun(interval: number, fn: fun(n: integer), timing: lunaloop.Timing, opts?: lunaloop.EveryOptions): lunaloop.Handle
function task.every(interval, fn, opts) end

---Caps the seconds one run of `timing` spends on callbacks (nil or 0: no cap). Not in mods.
---@param timing lunaloop.Timing
---@param seconds number?
function task.set_budget(timing, seconds) end

---An await: the first result of each input, in order; raises the first error.
---@async
---@param ... lunaloop.Awaitable|(async fun(): any)
---@return any ...
function task.when_all(...) end

---An await: the index of the first input to finish, then its results.
---@async
---@param ... lunaloop.Awaitable|(async fun(): any)
---@return integer index
---@return any ...
function task.when_any(...) end

---An await: runs fn(...) as a child; raises a timeout error after `seconds`.
---@async
---@param seconds number
---@param fn lunaloop.Awaitable|(async fun(...): ...)
---@param ... any
---@return any ...
function task.timeout(seconds, fn, ...) end

---Calls fn(scope, ...) in the calling task; returns once the body and all children ended.
---@async
---@param fn async fun(scope: lunaloop.Scope, ...): ...
---@param ... any
---@return any ...
function task.scope(fn, ...) end

---A FIFO between tasks: no capacity = unbounded, 0 = rendezvous.
---@param capacity integer?
---@return lunaloop.Channel
function task.channel(capacity) end

---A lifetime and clock group (task.group, docs/groups.md).
---@class lunaloop.Group
---@field name string? its name
local Group = {}
---Spawns fn(...) now as a member (as task.spawn); raises once cancelled.
---@param fn async fun(...): ...
---@return lunaloop.Task
function Group:spawn(fn, ...) end
---Starts fn(...) as a member at the next run of Update at which the group is not paused.
---@param fn async fun(...): ...
---@return lunaloop.Task
function Group:defer(fn, ...) end
---@param timing lunaloop.Timing
---@param fn async fun(...): ...
---@return lunaloop.Task
function Group:spawn_at(timing, fn, ...) end
---Waits `seconds` on the group's clock (the running task; default timing Update).
---@async
---@param seconds number
---@param timing lunaloop.Timing?
function Group:delay(seconds, timing) end
---The next run of `timing` at which the group is not paused.
---@async
---@param timing lunaloop.Timing?
function Group:yield(timing) end
---@async
---@param timing lunaloop.Timing?
function Group:next_frame(timing) end
---@async
---@param n integer frames of the group
---@param timing lunaloop.Timing?
function Group:delay_frame(n, timing) end
---task.on as a callback of the group: not called while paused; dt in group time.
---@return lunaloop.Handle
function Group:on(...) end
---task.every on the group's clock (no opts.clock).
---@param interval number seconds of group time
---@param fn fun(n: integer)
---@return lunaloop.Handle
function Group:every(interval, fn, ...) end
---@return lunaloop.Group
function Group:pause() end
---@return lunaloop.Group
function Group:resume() end
---True when the group or an ancestor is paused.
---@return boolean
function Group:paused() end
---Its own time scale (0 to 1e6), set when x is given.
---@param x number?
---@return number
function Group:time_scale(x) end
---Its scale times its ancestors'.
---@return number
function Group:effective_scale() end
---@return number seconds on the group's clock
function Group:time() end
---@return integer frames the group ran (not paused)
function Group:frame() end
---Cancels every member (and those of the groups below it) in creation order, removes
---its callbacks, closes it. Also at the end of a `<close>` variable's scope.
---@return integer cancelled
function Group:cancel() end
---@return boolean
function Group:cancelled() end
---Awaits every member; raises a member's failure.
---@async
function Group:wait() end
---@return integer live members, descendants included
function Group:count() end
---@return lunaloop.Task[] live direct members in creation order
function Group:members() end
---@param t lunaloop.Task
---@return boolean
function Group:has(t) end
---@return lunaloop.Group?
function Group:parent() end

---@class lunaloop.GroupOptions
---@field time_scale number? default 1
---@field paused boolean? default false
---@field name string?
---@field parent lunaloop.Group|false|nil default: the group of the running task

---A new group (docs/groups.md).
---@param opts lunaloop.GroupOptions?
---@return lunaloop.Group
function task.group(opts) end

---task.spawn outside every group, even from a member.
---@param fn async fun(...): ...
---@return lunaloop.Task
function task.ungrouped(fn, ...) end

---The group t is a direct member of, or nil.
---@param t lunaloop.Task
---@return lunaloop.Group?
function task.group_of(t) end

---An event many handlers subscribe to and a task can await (docs/api.md,
---"Signals"). Handlers are plain calls on the firing thread: they cannot await.
---@class lunaloop.Signal
local Signal = {}
---Calls fn(...) at every fire, in connection order, until disconnected;
---opts.once: disconnected before its first call.
---@param fn fun(...)
---@param opts { once: boolean? }?
---@return lunaloop.Connection
function Signal:connect(fn, opts) end
---Calls every handler connected now, then resumes the tasks waiting on it.
---A raising handler is reported and the others still run.
function Signal:fire(...) end
---Delivers the fire at the next run of the signal's timing, in fire order.
function Signal:fire_deferred(...) end
---An await: the values of the next fire. With seconds (scaled clock, checked
---at Update), raises task.timeout's error when none came.
---@async
---@param seconds number?
---@return any ...
function Signal:wait(seconds) end
---Ends every connection; waiting tasks get the cancellation error.
function Signal:destroy() end
---@return boolean
function Signal:is_destroyed() end

---@class lunaloop.Connection
local Connection = {}
---The handler is not called again, not even later in a fire under way.
function Connection:disconnect() end
---@return boolean
function Connection:connected() end

---@class lunaloop.SignalOptions
---@field timing lunaloop.Timing? where fire_deferred delivers (default "Update")

---A new Signal.
---@param opts lunaloop.SignalOptions?
---@return lunaloop.Signal
function task.signal(opts) end

---Worker Lua states (docs/workers.md). Calling it makes a pool:
---`task.workers{threads = 2}`; the first pool of a state is its default.
---@class lunaloop.Workers
---@overload fun(opts: lunaloop.WorkersOptions?): lunaloop.Pool
local Workers = {}
---A handle on module `name` in the default pool's workers (made with the
---defaults if there is none).
---@param name string
---@param opts lunaloop.WorkerModuleOptions?
---@return lunaloop.WorkerModule
function Workers.open(name, opts) end
---A read-only snapshot copied once; crosses to workers as a reference.
---Raises for functions, threads, userdata and cycles, naming the path.
---@param value any
---@return lunaloop.Share
function Workers.share(value) end
---@return lunaloop.Pool? the state's default pool
function Workers.pool() end

---@class lunaloop.WorkersOptions
---@field threads integer? 1..256 (default: cores - 1, at least 1)
---@field queue integer? jobs waiting at most before a task's call awaits room (default 64 per thread)
---@field memory integer? bytes per worker state (0: no limit); running out rejects the job and recreates the state
---@field instructions integer? default instruction budget of a job (0: none)

---@class lunaloop.WorkerModuleOptions
---@field deliver_frame integer? deliver each result exactly k (>= 1) frames after the call; the loop waits for a late job
---@field instructions integer? instruction budget per job (0: none)

---@class lunaloop.Share

---@class lunaloop.Pool
local Pool = {}
---@param name string
---@param opts lunaloop.WorkerModuleOptions?
---@return lunaloop.WorkerModule
function Pool:open(name, opts) end
---Jobs not done end with the cancellation error; joins the threads.
function Pool:close() end
---@return lunaloop.WorkerStats
function Pool:stats() end

---@class lunaloop.WorkerStats
---@field threads integer
---@field queue integer the queue's limit
---@field queued integer
---@field running integer
---@field submitted integer
---@field completed integer
---@field failed integer
---@field dropped integer given up before a worker ran them
---@field waited integer calls that awaited room
---@field overflowed integer jobs queued past the limit by callers that could not await
---@field recreated integer worker states recreated after running out of memory
---@field closed boolean

---@class lunaloop.WorkerModule
local WorkerModule = {}
---Runs module[fn](...) on a worker with copies of the arguments. From a
---task, a full queue makes it await room.
---@param fn string
---@param ... any
---@return lunaloop.Promise
function WorkerModule:call(fn, ...) end
---One-way call; a failing post is reported through task.on_error.
---@param fn string
---@param ... any
function WorkerModule:post(fn, ...) end
---An await: fn(item, index) for every item, `chunk` (64) items per job;
---returns the first results in order.
---@param fn string
---@param items any[]
---@param opts {chunk: integer?}?
---@return any[]
function WorkerModule:map(fn, items, opts) end

---Installs fn(err, traceback, task?, what) as the error handler; returns the
---previous one. `what` is the default report's subject ("task worker",
---"callback main.lua:30", ...).
---@param fn fun(err: any, traceback: string?, task: lunaloop.Task?, what: string)|nil
---@return fun(err: any, traceback: string?, task: lunaloop.Task?, what: string)|nil previous
function task.on_error(fn) end

---@param err any
---@return boolean
function task.is_cancelled(err) end

---@param err any
---@return boolean
function task.is_timeout(err) end

---Ends `lunaloop run` / task.run with `code`. Not in mods.
---@param code integer?
function task.exit(code) end

---@return integer frames begun
function task.frame() end

---@param clock lunaloop.Clock?
---@return number seconds
function task.time(clock) end

---@return number seconds: fixed_dt in a fixed step, else the scaled frame delta
function task.delta_time() end

---Reads (and outside mods sets) the time scale.
---@param scale number?
---@return number
function task.time_scale(scale) end

---Runs one frame (not from inside a task or callback). Not in mods.
---@param dt number?
---@return integer frame
function task.step(dt) end

---Runs frames until nothing is alive; returns an exit code. Not in mods.
---@param opts lunaloop.RunOptions?
---@return integer code
function task.run(opts) end

---@return lunaloop.Task[] the live tasks of this Lua state, in creation order
function task.list() end

---@return lunaloop.Stats
function task.stats() end

---Paces this state's garbage collector by the frame (docs/frame-time.md):
---a table replaces the state's settings, false returns it to the loop's,
---nothing only reads them. Not in mods (the host paces them).
---@param opts lunaloop.GcOptions|false?
---@return lunaloop.GcSettings
function task.gc(opts) end

---Debugging aids. Not in mods.
---@param opts {creation_traceback: boolean?, profile: boolean?}?
---@return {creation_traceback: boolean, profile: boolean}
function task.debug(opts) end

---@class mods.Subscription
local Subscription = {}
---Stops the subscription (also __close).
function Subscription:remove() end
---@return boolean
function Subscription:active() end

---@class mods.Stats
---@field memory integer bytes used by this mod's state
---@field host_memory integer bytes the host keeps for this mod (its messages waiting on the bus, its subscribed topics); counted against memory_limit with memory
---@field messages_waiting integer this mod's messages waiting for delivery
---@field memory_limit integer
---@field instruction_limit integer per resume or call
---@field time_limit number seconds of this mod's code per frame (negative: none)
---@field budget_overruns integer since this load
---@field memory_overruns integer since this load
---@field time_overruns integer frames that reached the time budget, since this load
---@field max_overruns integer the mod is disabled at this many overruns
---@field loads integer 1 + reloads

---The `mods` module, a global in every mod (also require "mods").
---@class mods
---@field name string this mod's name (manifest)
---@field version string this mod's version (manifest)
mods = {}

---Copies `value` now (nil, booleans, numbers, strings, tables of those; no
---cycles) and delivers it to every subscriber of `topic` at the next bus
---delivery. Raises for values that cannot cross, for a topic longer than
---256 bytes or with a NUL byte, when this mod's share of the bus is full
---(65,536 messages or 64 message limits of bytes waiting), or at its
---memory cap (waiting messages count against it).
---@param topic string
---@param value nil|boolean|number|string|table
function mods.send(topic, value) end

---Calls fn(value, topic, sender) with a copy of each message on `topic`.
---Raises for a topic longer than 256 bytes or with a NUL byte.
---@param topic string
---@param fn fun(value: any, topic: string, sender: string)
---@return mods.Subscription
function mods.subscribe(topic, fn) end

---On a reload, fn gets a copy of what the previous instance's on_unload returned.
---@param fn fun(state: any)|nil
function mods.on_load(fn) end

---fn() runs before this mod is unloaded or reloaded; on a reload its result
---(copied like a message) goes to the new instance's on_load.
---@param fn fun(): any|nil
function mods.on_unload(fn) end

---@param name string
---@return boolean
function mods.is_loaded(name) end

---@return string[] the loaded mods in load order
function mods.list() end

---@return mods.Stats
function mods.stats() end

---Roblox's task library on lunaloop tasks: require "lunaloop.roblox", or the
---global task of `lunaloop run --roblox` (docs/roblox.md). Other names fall
---through to the lunaloop module.
---@class lunaloop.roblox: lunaloop
local roblox = {}
---Runs a function (or resumes a thread) now with the arguments; returns the thread.
---@param fn_or_thread function|thread
---@return thread
function roblox.spawn(fn_or_thread, ...) end
---Runs it once the running code has waited or ended, in the same run.
---@param fn_or_thread function|thread
---@return thread
function roblox.defer(fn_or_thread, ...) end
---Runs it at the first Update after `seconds` on the scaled clock.
---@param seconds number
---@param fn_or_thread function|thread
---@return thread
function roblox.delay(seconds, fn_or_thread, ...) end
---An await: until the first Update after `seconds` (default 0); returns the
---scaled seconds waited since the call.
---@async
---@param seconds number?
---@return number
function roblox.wait(seconds) end
---Cancels a task, or closes a plain coroutine; not the running thread.
---@param thread thread
function roblox.cancel(thread) end
---No-ops: a lunaloop state runs on one thread.
function roblox.synchronize() end
function roblox.desynchronize() end

---@class lunaloop.SimTick
---@field tick integer the tick simulated (a batch's last tick)
---@field dt number seconds: the tick length times batch (less for a partial tick)
---@field batch integer ticks this step covers
---@field first boolean the tick's first full simulation
---@field resimulating boolean simulated before, again after a load
---@field partial boolean a partial tick (undone before the next full tick)
---@field catch_up boolean a batched catch-up step
---@field final boolean the frame's (or host call's) last step
---@field flags integer the luna_sim_flag bits

---@class lunaloop.SimTimer
---@field at integer the tick it expires at
local SimTimer = {}
---@return integer ticks left (0 once expired)
function SimTimer:remaining() end
---@return boolean
function SimTimer:expired() end

---@class lunaloop.SimRandom
local SimRandom = {}
---@param m integer
---@param n? integer
---@return integer uniform in [m, n] (one argument: [1, m])
function SimRandom:int(m, n) end
---@return number uniform in [0, 1)
function SimRandom:float() end
---@return integer 64 random bits
function SimRandom:next() end

---@class lunaloop.SimOptions
---@field tick_rate? number ticks per second (or `tick`)
---@field tick? number seconds per tick
---@field history? integer snapshots kept, default 64
---@field check_distance? integer the sync-test's distance, 0 off
---@field policy? "drop"|"batch"|"debt"|"render_paced"|"manual"
---@field max_ticks? integer
---@field max_batch? integer
---@field max_debt? integer
---@field rate_scale? number
---@field timing? lunaloop.Timing the first timing of the pair, default "FixedUpdate"

---A simulation group (task.sim, task.sim_open): functions called with a dot.
---@class lunaloop.Sim
---@field state fun(name: string, tbl: table): table registers tbl in every snapshot
---@field on_tick fun(fn: fun(t: lunaloop.SimTick), opts?: {priority?: integer}): {remove: fun()}
---@field timer fun(ticks: integer): lunaloop.SimTimer
---@field random fun(seed: integer): lunaloop.SimRandom
---@field effect fun(key: string|number|boolean, fn: function|{confirm?: boolean}, ...): boolean
---@field tick fun(): integer
---@field newest fun(): integer
---@field confirmed fun(): integer
---@field history fun(): integer?, integer?
---@field alpha fun(): number
---@field dt fun(): number
---@field step fun(n?: integer): integer checksum
---@field save fun(): integer checksum
---@field load fun(tick: integer): integer?, string?
---@field resimulate fun(from?: integer): integer?, string?
---@field partial fun(fraction?: number): boolean
---@field confirm fun(tick: integer)
---@field export fun(tick?: integer): string?, string?
---@field import fun(bytes: string, opts?: {load?: boolean}): integer?, integer|string
---@field checksum fun(tick?: integer): integer?, string?
---@field diff fun(a: integer, b: integer): string?, any, any
---@field wait_tick fun(n?: integer): integer
---@field stats fun(): table
---@field config fun(): table
---@field set_rate_scale fun(scale: number)
---@field close fun()

---The simulation the host or `lunaloop run --sim-tick-rate` attached, or
---the last task.sim_open made; nil without one.
---@type lunaloop.Sim|nil
task.sim = nil

---Makes a simulation on the state's loop (one per loop) and makes it task.sim.
---@param opts? lunaloop.SimOptions
---@return lunaloop.Sim
function task.sim_open(opts) end

---Waits until n (default 1) more ticks of sim (default task.sim) were
---simulated for the first time; returns the head tick.
---@param n? integer
---@param sim? lunaloop.Sim
---@return integer
function task.wait_tick(n, sim) end

---@type lunaloop
_G.task = task

return task
