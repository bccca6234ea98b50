//go:build e2e

package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The verb check: after a full e2e run on the real node, every verb the
// operator's roles grant must appear in the API server's audit log of its
// ServiceAccount's requests (hack/realnode/audit-policy.yaml), or be listed
// in unexercised with the reason the run cannot show it. A verb granted and
// never used is privilege a compromised operator would have for nothing.

// OperatorUser is the operator's ServiceAccount as the API server names it.
const OperatorUser = "system:serviceaccount:" + OperatorNamespace + ":daytwo-operator"

// operatorRoles are the files that grant the operator's ServiceAccount its
// verbs.
var operatorRoles = []string{"config/rbac/role.yaml", "config/rbac/leader_election_role.yaml"}

// unexercised are granted verbs a passing e2e run does not use, each with
// why it is granted all the same.
var unexercised = map[string]string{}

// grant is one verb on one resource ("deployments.apps", "pods",
// "databases/status.daytwo.dev").
type grant struct{ resource, verb string }

func (g grant) String() string { return g.verb + " " + g.resource }

func resourceName(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// granted reads the verbs the operator's roles grant.
func granted(root string) (map[grant]bool, error) {
	out := map[grant]bool{}
	for _, f := range operatorRoles {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, doc := range splitYAML(string(raw)) {
			var role struct {
				Kind  string              `json:"kind"`
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if role.Kind != "Role" && role.Kind != "ClusterRole" {
				continue
			}
			for _, r := range role.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						for _, v := range r.Verbs {
							out[grant{resourceName(g, res), v}] = true
						}
					}
				}
			}
		}
	}
	return out, nil
}

// used reads the verbs user asked for from an audit log.
func used(path, user string) (map[grant]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[grant]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			User      struct{ Username string } `json:"user"`
			Verb      string                    `json:"verb"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				APIGroup    string `json:"apiGroup"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.User.Username != user || ev.ObjectRef == nil {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		out[grant{resourceName(ev.ObjectRef.APIGroup, res), ev.Verb}]++
	}
	return out, sc.Err()
}

// CheckVerbs compares the operator's roles with its requests in the audit
// log at path, and returns an error naming every granted verb it never
// used that unexercised does not explain.
func CheckVerbs(path string) (string, error) {
	grants, err := granted(RepoRoot())
	if err != nil {
		return "", err
	}
	calls, err := used(path, OperatorUser)
	if err != nil {
		return "", err
	}
	var unused, explained []string
	for g := range grants {
		if calls[g] > 0 {
			continue
		}
		if why, ok := unexercised[g.String()]; ok {
			explained = append(explained, g.String()+" ("+why+")")
			continue
		}
		unused = append(unused, g.String())
	}
	sort.Strings(unused)
	sort.Strings(explained)
	total := 0
	for _, n := range calls {
		total += n
	}
	summary := fmt.Sprintf("%d verbs granted, %d requests by the operator audited, %d granted verbs explained as not exercised",
		len(grants), total, len(explained))
	if len(unused) > 0 {
		return summary, fmt.Errorf("granted to the operator but never used in the run (drop them from the kubebuilder markers, "+
			"or say in test/e2e/framework/audit.go why a run cannot use them):\n  %s", strings.Join(unused, "\n  "))
	}
	return summary, nil
}
