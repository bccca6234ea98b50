// Package flagtest checks the command-line contracts between the operator
// and the daytwo binary: what one side renders from a struct, the other
// parses back to the same struct.
package flagtest

import (
	"reflect"
	"testing"

	"github.com/spf13/pflag"
)

// RoundTrip fails t unless args(want), parsed by the flags bind defines,
// gives want back. Every field of want, and of the structs within it, must
// be set: a round trip proves nothing of a field it leaves out, so a new
// field fails here until its sample is.
func RoundTrip[T any](t testing.TB, want T, args func(T) []string, bind func(*T, *pflag.FlagSet)) {
	t.Helper()
	allSet(t, reflect.ValueOf(want), reflect.TypeOf(want).Name())
	var got T
	f := pflag.NewFlagSet("roundtrip", pflag.ContinueOnError)
	bind(&got, f)
	if err := f.Parse(args(want)); err != nil {
		t.Fatalf("parsing %q: %v", args(want), err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q parsed to\n%+v\nwant\n%+v", args(want), got, want)
	}
}

func allSet(t testing.TB, v reflect.Value, path string) {
	t.Helper()
	if v.Kind() == reflect.Struct {
		for i := range v.NumField() {
			allSet(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
		return
	}
	if v.IsZero() {
		t.Errorf("%s is zero in the round trip's sample: set it", path)
	}
}
