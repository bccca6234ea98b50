-- Asks for one switchover now: the replica that received the most WAL
-- becomes the primary (a time newer than status.lastSwitchover's).
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["daytwo.dev/switchover-requested"] = os.date("!%Y-%m-%dT%XZ")
-- Not to the target an earlier switchover named: that one is the primary now.
obj.metadata.annotations["daytwo.dev/switchover-to"] = nil
return obj
