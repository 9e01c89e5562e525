-- hud: depends on core and only talks to it through the bus. Values arrive
-- as copies: changing them here changes nothing in core.
local shown = 0

mods.subscribe("core.wave", function(w)
  print(("wave %d: %d enemies"):format(w.wave, #w.enemies))
  w.enemies[1].hp = 0 -- our copy only
end)

local score_sub = mods.subscribe("core.score", function(s)
  shown = s.score
end)

mods.subscribe("core.over", function(s, topic, from)
  print(("%s says %s: score %d (hud showed %d)"):format(from, topic, s.score, shown))
  score_sub:remove()
end)

print("hud ready; core loaded: " .. tostring(mods.is_loaded("core")))
