-- Stops daytwo from acting on the Database; its instances keep running.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["daytwo.dev/reconcile"] = "paused"
return obj
