-- Tries a failed major upgrade again: any value other than the one the
-- annotation had when it failed.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["daytwo.dev/retry-upgrade"] = os.date("!%Y-%m-%dT%XZ")
return obj
