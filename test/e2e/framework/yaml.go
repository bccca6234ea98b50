//go:build e2e

package framework

import "strings"

// splitYAML splits a multi-document YAML stream on its "---" separators.
func splitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}
