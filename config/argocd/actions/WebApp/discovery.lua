-- Argo CD's actions on a daytwo WebApp: promote or abort the canary that
-- runs (status.canary is there while one runs, on steps 1 to steps).
local actions = {}
local running = false
if obj.status ~= nil and obj.status.canary ~= nil then
  local c = obj.status.canary
  running = c.step ~= nil and c.steps ~= nil and c.step <= c.steps
end
actions["promote-canary"] = {["disabled"] = not running}
actions["abort-canary"] = {["disabled"] = not running}
return actions
