return {
  name = "hud",
  version = "0.3.0",
  depends = {"core"},   -- loads after core
}
