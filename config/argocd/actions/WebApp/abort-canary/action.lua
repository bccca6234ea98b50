-- Aborts the running canary, as an automatic abort does: the stable pods
-- keep their image.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["daytwo.dev/abort-requested"] = os.date("!%Y-%m-%dT%XZ")
return obj
