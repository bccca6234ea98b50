// Package argocd runs daytwo's Argo CD health check (config/argocd/health.lua)
// the way Argo CD does: a Lua interpreter (gopher-lua, Argo CD's own) with
// the object as the global obj, returning {status, message}.
package argocd

import (
	"encoding/json"
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// Health is what the script returns.
type Health struct {
	Status  string
	Message string
}

// Evaluate runs script against obj (an object as the API server returns it).
func Evaluate(script string, obj any) (Health, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return Health{}, err
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return Health{}, err
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, generic))
	if err := L.DoString(script); err != nil {
		return Health{}, err
	}
	t, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return Health{}, fmt.Errorf("the script returned %s, want a table", L.Get(-1).Type())
	}
	return Health{Status: lua.LVAsString(t.RawGetString("status")), Message: lua.LVAsString(t.RawGetString("message"))}, nil
}

// toLua converts decoded JSON to Lua values, arrays as 1-based tables, as
// Argo CD does.
func toLua(L *lua.LState, v any) lua.LValue { //nolint:gocritic // gopher-lua's own name for its state
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}
