print("never printed: the script must fail to load")
local x =
  = 3
