-- Asks for one run now, besides the schedule.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["daytwo.dev/backup-requested"] = os.date("!%Y-%m-%dT%XZ")
return obj
