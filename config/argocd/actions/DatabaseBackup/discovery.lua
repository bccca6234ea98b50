-- Argo CD's actions on a daytwo DatabaseBackup.
local actions = {}
actions["backup-now"] = {["disabled"] = false}
return actions
