-- Argo CD health of a daytwo.dev object (Database, DatabaseBackup, WebApp),
-- from the conditions daytwo writes. Argo CD gives the object as obj.
local hs = {}

local function result(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  return result("Progressing", "Waiting for daytwo to report on this object")
end
if obj.metadata.generation ~= nil and (obj.status.observedGeneration == nil or obj.status.observedGeneration < obj.metadata.generation) then
  return result("Progressing", "Waiting for daytwo to observe the latest spec")
end

local c = {}
for _, cond in ipairs(obj.status.conditions) do
  c[cond.type] = cond
end
local function is(name, status)
  return c[name] ~= nil and c[name].status == status
end
local function message(name)
  local m = c[name].message
  if m == nil or m == "" then
    return name .. " is " .. c[name].status .. " (" .. (c[name].reason or "") .. ")"
  end
  return m
end

-- Faults that need a person: the spec, a conflict, a failed restore,
-- upgrade, rollout, backup or verification.
local needsAPerson = {
  InvalidSpec = true, ConflictingResource = true, CertificateInvalid = true, RestoreFailed = true,
  ImportFailed = true, DataConflict = true, MissingReference = true, DatabaseNotFound = true,
}
if c.Ready ~= nil and c.Ready.reason == "Suspended" then
  return result("Suspended", message("Ready"))
end
-- A WebApp canary that waits for a person to promote it.
if c.Progressing ~= nil and c.Progressing.reason == "CanaryWaiting" then
  return result("Suspended", message("Progressing"))
end
if c.Ready ~= nil and c.Ready.status == "False" and needsAPerson[c.Ready.reason] then
  return result("Degraded", message("Ready"))
end
if is("Degraded", "True") then
  return result("Degraded", message("Degraded"))
end
for _, name in ipairs({"UpgradeFailed", "LastRunFailed", "BackupStale"}) do
  if is(name, "True") then
    return result("Degraded", message(name))
  end
end
if is("Verified", "False") then
  return result("Degraded", message("Verified"))
end
if is("ContinuousArchiving", "False") and c.ContinuousArchiving.reason == "ArchivingFailed" then
  return result("Degraded", message("ContinuousArchiving"))
end
if c.Progressing ~= nil and c.Progressing.status == "False" and
    (c.Progressing.reason == "RolledBack" or c.Progressing.reason == "ProgressDeadlineExceeded") then
  return result("Degraded", message("Progressing"))
end
-- A Database short of instances, or serving without its primary ready.
if obj.status.phase == "Degraded" then
  if is("Progressing", "True") then
    return result("Degraded", message("Progressing"))
  end
  return result("Degraded", message("Ready"))
end
if is("Progressing", "True") then
  return result("Progressing", message("Progressing"))
end
if is("Ready", "True") then
  return result("Healthy", message("Ready"))
end
if c.Ready ~= nil then
  -- Not ready for a reason daytwo works on: instances starting, a
  -- failover, a primary coming back.
  return result("Progressing", message("Ready"))
end
return result("Progressing", "Waiting for the Ready condition")
