-- Argo CD's actions on a daytwo Database. Each one sets an annotation the
-- operator already understands, so it does what kubectl daytwo does.
local actions = {}
local instances = 1
if obj.spec ~= nil and obj.spec.instances ~= nil then
  instances = obj.spec.instances
end
local upgradeFailed = false
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "UpgradeFailed" and c.status == "True" then
      upgradeFailed = true
    end
  end
end
local paused = obj.metadata.annotations ~= nil and obj.metadata.annotations["daytwo.dev/reconcile"] == "paused"
actions["switchover"] = {["disabled"] = instances < 2 or paused}
actions["retry-upgrade"] = {["disabled"] = not upgradeFailed}
actions["pause"] = {["disabled"] = paused}
actions["resume"] = {["disabled"] = not paused}
return actions
