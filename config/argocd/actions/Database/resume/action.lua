-- daytwo acts on the Database again.
if obj.metadata.annotations ~= nil then
  obj.metadata.annotations["daytwo.dev/reconcile"] = nil
  if next(obj.metadata.annotations) == nil then
    -- Argo CD keeps a table emptied by an action as it was: leave a
    -- value that does not pause.
    obj.metadata.annotations["daytwo.dev/reconcile"] = ""
  end
end
return obj
