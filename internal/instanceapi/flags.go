package instanceapi

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// ArgsOf renders v as the command-line flags bind defines on a flag set, in
// the flags' order, so the side that writes a command line and the side
// that parses it read one definition. A zero field (an empty string,
// false, 0, an empty list) is left out: the binary's default applies.
func ArgsOf[T any](v T, bind func(*T, *pflag.FlagSet)) []string {
	var into T
	f := pflag.NewFlagSet("args", pflag.ContinueOnError)
	f.SortFlags = false
	// bind points every flag at a field of into; the values are then v's.
	bind(&into, f)
	into = v
	var args []string
	f.VisitAll(func(fl *pflag.Flag) {
		switch val := fl.Value.(type) {
		case pflag.SliceValue:
			if s := val.GetSlice(); len(s) > 0 {
				args = append(args, "--"+fl.Name+"="+strings.Join(s, ","))
			}
		default:
			switch s := fl.Value.String(); fl.Value.Type() {
			case "bool":
				if s == "true" {
					args = append(args, "--"+fl.Name)
				}
			case "string":
				if s != "" {
					args = append(args, "--"+fl.Name+"="+s)
				}
			case "int", "int32", "int64":
				if s != "0" {
					args = append(args, "--"+fl.Name+"="+s)
				}
			case "duration":
				if s != "0s" {
					args = append(args, "--"+fl.Name+"="+s)
				}
			default:
				panic(fmt.Sprintf("instanceapi.ArgsOf: flag --%s of type %s is not rendered", fl.Name, fl.Value.Type()))
			}
		}
	})
	return args
}
