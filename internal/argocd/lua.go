// Package argocd runs daytwo's Argo CD health check and resource actions
// (config/argocd) the way Argo CD does: a gopher-lua interpreter (Argo
// CD's own) with the object as the global obj and only the libraries Argo
// CD opens for scripts from argocd-cm (base, package, table, and an os
// that tells the time and nothing else), so a script that leans on
// another library fails here as it would there.
package argocd

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// Health is what a health check returns.
type Health struct {
	Status  string
	Message string
}

// Action is one action a discovery script offers.
type Action struct {
	Name     string
	Disabled bool
}

// Actions is a kind's resource actions as argocd-cm holds them.
type Actions struct {
	Discovery   string       `json:"discovery.lua"`
	Definitions []Definition `json:"definitions"`
}

// Definition is one action's script.
type Definition struct {
	Name   string `json:"name"`
	Script string `json:"action.lua"`
}

// ConfigMap is the data of argocd-cm.yaml.
type ConfigMap map[string]string

// LoadConfigMap reads the argocd-cm.yaml users merge into Argo CD.
func LoadConfigMap(path string) (ConfigMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Data ConfigMap `json:"data"`
	}
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cm.Data, nil
}

// Health is kind's health check (daytwo.dev kinds).
func (cm ConfigMap) Health(kind string) string {
	return cm["resource.customizations.health.daytwo.dev_"+kind]
}

// Actions is kind's resource actions (daytwo.dev kinds).
func (cm ConfigMap) Actions(kind string) (Actions, error) {
	var a Actions
	err := yaml.UnmarshalStrict([]byte(cm["resource.customizations.actions.daytwo.dev_"+kind]), &a)
	return a, err
}

// Script is the action called name, or "".
func (a Actions) Script(name string) string {
	for _, d := range a.Definitions {
		if d.Name == name {
			return d.Script
		}
	}
	return ""
}

// Evaluate runs a health check against obj (an object as the API server
// returns it).
func Evaluate(script string, obj any) (Health, error) {
	t, err := run(script, obj)
	if err != nil {
		return Health{}, err
	}
	return Health{Status: lua.LVAsString(t.RawGetString("status")), Message: lua.LVAsString(t.RawGetString("message"))}, nil
}

// Discover runs a discovery script against obj: the actions it offers,
// sorted by name.
func Discover(script string, obj any) ([]Action, error) {
	t, err := run(script, obj)
	if err != nil {
		return nil, err
	}
	var out []Action
	t.ForEach(func(k, v lua.LValue) {
		a := Action{Name: lua.LVAsString(k)}
		if vt, ok := v.(*lua.LTable); ok {
			a.Disabled = lua.LVAsBool(vt.RawGetString("disabled"))
		}
		out = append(out, a)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Run runs an action against obj and returns the object Argo CD patches
// obj to: the table the script returned, decoded as Argo CD decodes it (an
// empty table is an empty array), with each empty array that was an object
// in obj given back obj's object, as Argo CD does.
func Run(script string, obj any) (map[string]any, error) {
	t, err := run(script, obj)
	if err != nil {
		return nil, err
	}
	out, ok := fromLua(t).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the action returned %T, want an object", fromLua(t))
	}
	in, err := generic(obj)
	if err != nil {
		return nil, err
	}
	if in, ok := in.(map[string]any); ok {
		keepEmptyObjects(out, in)
	}
	return out, nil
}

// keepEmptyObjects gives each empty array of out that is an object in the
// input the input's value back, through objects and arrays.
func keepEmptyObjects(out, in any) {
	switch o := out.(type) {
	case map[string]any:
		i, _ := in.(map[string]any)
		for k, v := range o {
			if arr, isArr := v.([]any); isArr && len(arr) == 0 {
				if old, isMap := i[k].(map[string]any); isMap {
					o[k] = old
					continue
				}
			}
			keepEmptyObjects(v, i[k])
		}
	case []any:
		i, _ := in.([]any)
		for n, v := range o {
			if n < len(i) {
				keepEmptyObjects(v, i[n])
			}
		}
	}
}

func generic(obj any) (any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(b, &out)
}

func run(script string, obj any) (*lua.LTable, error) {
	g, err := generic(obj)
	if err != nil {
		return nil, err
	}
	L := newState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, g))
	if err := L.DoString(script); err != nil {
		return nil, err
	}
	t, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("the script returned %s, want a table", L.Get(-1).Type())
	}
	return t, nil
}

// newState opens what Argo CD opens for a script from argocd-cm: package,
// base and table, and os with only date and time (its "safe" os).
func newState() *lua.LState {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.OsLibName, lua.OpenOs}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	full := L.GetGlobal(lua.OsLibName).(*lua.LTable)
	safe := L.NewTable()
	for _, fn := range []string{"date", "time"} {
		safe.RawSetString(fn, full.RawGetString(fn))
	}
	L.SetGlobal(lua.OsLibName, safe)
	L.PreloadModule(lua.OsLibName, func(L *lua.LState) int {
		L.Push(safe)
		return 1
	})
	return L
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

// fromLua converts back as Argo CD's JSON encoder does: a table with a
// sequence is an array, an empty one an empty array, any other an object.
func fromLua(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LBool:
		return bool(v)
	case lua.LNumber:
		return float64(v)
	case lua.LString:
		return string(v)
	case *lua.LTable:
		if n := v.MaxN(); n > 0 || v.Len() == 0 && isEmpty(v) {
			arr := make([]any, 0, n)
			for i := 1; i <= n; i++ {
				arr = append(arr, fromLua(v.RawGetInt(i)))
			}
			return arr
		}
		m := map[string]any{}
		v.ForEach(func(k, e lua.LValue) { m[lua.LVAsString(k)] = fromLua(e) })
		return m
	}
	return nil
}

func isEmpty(t *lua.LTable) bool {
	k, _ := t.Next(lua.LNil)
	return k == lua.LNil
}
