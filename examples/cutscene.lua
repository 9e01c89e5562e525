-- cutscene.lua: a cutscene and dialogue sequencer. One task plays the
-- script of the scene line by line; the frame's timings share the work:
--
--   EarlyUpdate         sample the input (the player's SKIP button)
--   Update              the sequencer, the skip watcher, the typewriter
--   LastUpdate          "is the line fully typed?", after this frame's typing
--   PreLateUpdate       camera pans, after the game logic of the frame
--   PostLateUpdate      camera shake, on top of wherever the camera is
--   LastPostLateUpdate  the renderer: reports what is on screen
--
-- It also shows slow motion (task.time_scale) next to UI delays on the
-- unscaled clock, task.next_frame and task.delay_frame for things that
-- need a frame to show up, and a SKIP that cancels the rest of the
-- sequence: its to-be-closed variables put the game back as it was.
--
-- Each line starts with the frame, the game (scaled) time t and the
-- unscaled time u; they part ways during the slow motion.
--
-- Run it in real time (about 4 seconds):
--   scripts/run examples/cutscene.lua
-- or with virtual time, instantly and with the same output on every run:
--   scripts/run --fast --seed 1 examples/cutscene.lua

local function say(fmt, ...)
  print(string.format("[frame %3d  t=%5.2fs  u=%5.2fs] " .. fmt,
    task.frame(), task.time(), task.time("unscaled"), ...))
end

---------------------------------------------------------------------------
-- The stage: camera, subtitles, game state
---------------------------------------------------------------------------

local camera = {x = 0.0, shot = "player", shake = 0.0, offset = 0.0}
local ui = {speaker = nil, text = "", prompt = nil, portrait = nil}
local game = {letterbox = false, input_locked = false}

local CPS = 30          -- typewriter speed, characters per (unscaled) second

---------------------------------------------------------------------------
-- Input, sampled at EarlyUpdate
---------------------------------------------------------------------------

local SKIP_AT = 4.3     -- the player presses SKIP at this unscaled time
local input = {skip = false}

local function sample_input()
  input.skip = task.time("unscaled") >= SKIP_AT
end

---------------------------------------------------------------------------
-- Camera: pans at PreLateUpdate, shake at PostLateUpdate
---------------------------------------------------------------------------

local function smoothstep(k) return k * k * (3 - 2 * k) end

-- Moves the camera to x over `seconds` of game time. Each step waits for
-- the next PreLateUpdate: the first one in this frame (we are called from
-- Update), then one per frame.
local function pan_camera(x, seconds, shot)
  local from, t0 = camera.x, task.time()
  say("camera pans from x=%.1f to the %s (%.2f s)", from, shot, seconds)
  repeat
    task.yield("PreLateUpdate")
    local k = math.min(1, (task.time() - t0) / seconds)
    camera.x = from + (x - from) * smoothstep(k)
  until k >= 1
  camera.shot = shot
end

local function shake(dt)                -- PostLateUpdate, while registered
  camera.shake = camera.shake * 0.9
  camera.offset = camera.shake * ((task.frame() % 2 == 0) and 1 or -1)
end

---------------------------------------------------------------------------
-- The renderer at LastPostLateUpdate: says what changed on screen
---------------------------------------------------------------------------

local shown = {}

local function render()
  local view = {
    letterbox = game.letterbox and "letterbox on" or "letterbox off",
    shot = "camera on the " .. camera.shot,
    prompt = ui.prompt and ("prompt [" .. ui.prompt .. "]") or "no prompt",
    portrait = ui.portrait and ("portrait of " .. ui.portrait) or "no portrait",
  }
  for _, key in ipairs({"letterbox", "shot", "portrait", "prompt"}) do
    if shown[key] ~= view[key] then
      if shown[key] ~= nil then say("  render: %s", view[key]) end
      shown[key] = view[key]
    end
  end
end

---------------------------------------------------------------------------
-- Dialogue
---------------------------------------------------------------------------

-- Types `text` one character at a time. The typewriter is a per-tick
-- callback at Update; the callback gets the scaled dt, but subtitles must
-- not slow down in slow motion, so it measures the unscaled clock itself.
-- The `<close>` handle removes the callback however this function ends,
-- also when the sequence is cancelled in the middle of a line.
local function type_line(speaker, text)
  ui.speaker, ui.text = speaker, ""
  local typed, last = 0.0, task.time("unscaled")
  local typer <close> = task.on("Update", function()
    local now = task.time("unscaled")
    typed = math.min(#text, typed + CPS * (now - last))
    last = now
    ui.text = text:sub(1, math.floor(typed))
  end)
  local f0 = task.frame()
  -- Checked at LastUpdate: after the typewriter ran in the same frame.
  task.wait_until(function() return ui.text == text end, "LastUpdate")
  say('%s: "%s"  (typed in %d frames)', speaker, text, task.frame() - f0)
end

---------------------------------------------------------------------------
-- Entering and leaving the cutscene
---------------------------------------------------------------------------

-- Puts the game in cutscene mode. The value is for a `<close>` variable:
-- when the sequence ends, however it ends, the game is put back.
local function enter_cutscene()
  local saved = {x = camera.x, shot = camera.shot, scale = task.time_scale()}
  game.letterbox, game.input_locked = true, true
  say("cutscene begins: letterbox on, player input locked")
  return setmetatable({}, {__close = function(_, err)
    local how = err == nil and "ends" or task.is_cancelled(err) and "skipped" or "failed"
    if ui.text ~= "" then say('  restore: subtitle "%s" cleared', ui.text) end
    ui.speaker, ui.text, ui.prompt, ui.portrait = nil, "", nil, nil
    if task.time_scale() ~= saved.scale then
      task.time_scale(saved.scale)
      say("  restore: time scale %g again (from the next frame on)", saved.scale)
    end
    camera.x, camera.shot, camera.shake, camera.offset = saved.x, saved.shot, 0.0, 0.0
    game.letterbox, game.input_locked = false, false
    say("cutscene %s: camera back on the %s, letterbox off, input unlocked", how, saved.shot)
  end})
end

---------------------------------------------------------------------------
-- The scene
---------------------------------------------------------------------------

local function play_scene()
  local restore <close> = enter_cutscene()

  -- The pan runs in its own task while the first line is typed.
  local pan = task.spawn(pan_camera, 4.0, 0.75, "reactor")
  type_line("Alice", "The core is overheating.")
  task.await(pan)
  say("camera settled on the %s at x=%.1f", camera.shot, camera.x)
  task.delay(0.6)                        -- let the line sink in (game time)

  -- A hard cut. The new shot must be on screen (rendered at this frame's
  -- LastPostLateUpdate) before anything else happens: wait for the next frame.
  camera.x, camera.shot = 9.0, "corridor"
  say("camera cuts to the corridor")
  task.next_frame()
  -- Bob's portrait streams in; the loader needs two frames.
  say("loading Bob's portrait")
  task.delay_frame(2)
  ui.portrait = "Bob"
  type_line("Bob", "Then we leave. Now.")
  task.delay(0.4)

  -- The explosion: slow motion for the world, normal speed for the UI.
  ui.portrait = nil
  camera.shake = 0.5
  local shaker <close> = task.on("PostLateUpdate", shake)
  task.time_scale(0.2)
  say("BOOM: time scale 0.2 (this frame's dt stays %.4f s)", task.delta_time())
  task.next_frame()
  say("slow motion: dt is now %.4f s a frame", task.delta_time())

  -- Debris falls for 0.3 s of game time: 1.5 s at a fifth of the speed.
  local debris <close> = task.spawn(function()
    local u0 = task.time("unscaled")
    task.delay(0.3)
    say("  debris lands: 0.3 s of game time took %.2f s unscaled", task.time("unscaled") - u0)
  end)

  -- The prompt is UI: 0.6 s on the unscaled clock, slow motion or not.
  ui.prompt = "Hold on!"
  task.delay(0.6, "Update", "unscaled")
  ui.prompt = nil
  say("prompt closed after 0.6 s unscaled")

  type_line("Alice", "Run! The blast doors close in ten seconds!")
  task.await(debris)

  -- Not reached when the player skips during the line above.
  task.time_scale(1)
  pan_camera(0.0, 0.5, "player")
  type_line("Bob", "Made it.")
end

---------------------------------------------------------------------------
-- Main: start the scene, let the player skip it, then back to the game
---------------------------------------------------------------------------

say("the player will press SKIP at u=%.1f s", SKIP_AT)
local h_input  <close> = task.on("EarlyUpdate", sample_input)
local h_render <close> = task.on("LastPostLateUpdate", render)
render()                                 -- what is on screen before frame 1

local scene = task.spawn(play_scene)
scene.name = "scene"

-- Game logic at Update reads the input sampled at this frame's EarlyUpdate.
local skipper <close> = task.spawn(function()
  task.wait_until(function() return input.skip end)
  say("SKIP pressed")
  scene:cancel()                         -- returns once the scene has unwound
  say("skip handled")
end)

local ok, err = pcall(task.await, scene)
if ok then
  say("the cutscene played to the end")
elseif task.is_cancelled(err) then
  say("the rest of the cutscene was skipped")
else
  error(err, 0)
end

task.next_frame()
say("first gameplay frame: time scale %g, dt %.4f s, camera on the %s at x=%.1f",
  task.time_scale(), task.delta_time(), camera.shot, camera.x)
