-- The manifest: a text chunk run in an empty environment; it returns a table.
return {
  name = "core",
  version = "1.0.0",
  load_order = 0,
}
