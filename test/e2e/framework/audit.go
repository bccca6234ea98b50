//go:build e2e

package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
// Read verbs count as one (readVerbs); a server-side apply that creates
// counts as create.

// OperatorUser is the operator's ServiceAccount as the API server names it.
const OperatorUser = "system:serviceaccount:" + OperatorNamespace + ":daytwo-operator"

// operatorRoles are the files that grant the operator's ServiceAccount its
// verbs.
var operatorRoles = []string{"config/rbac/role.yaml", "config/rbac/leader_election_role.yaml"}

// unexercised are granted verbs a passing e2e run does not use, each with
// why it is granted all the same and which test shows the code calling it.
var unexercised = map[string]string{
	"create horizontalpodautoscalers.autoscaling": autoscaling,
	"patch horizontalpodautoscalers.autoscaling":  autoscaling,
	"delete horizontalpodautoscalers.autoscaling": autoscaling,
	"update webapps/scale.daytwo.dev":             autoscaling,
	"create ingresses.networking.k8s.io":          ingress,
	"patch ingresses.networking.k8s.io":           ingress,
	"delete ingresses.networking.k8s.io":          ingress,
	"update databasebackups.daytwo.dev": "a changed spec.backup updates its DatabaseBackup; " +
		"envtest TestSpecBackupManagesADatabaseBackup",
	"delete databasebackups.daytwo.dev": "a removed spec.backup deletes its DatabaseBackup; " +
		"envtest TestSpecBackupManagesADatabaseBackup",
	"patch persistentvolumeclaims": "volume growth; local-path cannot expand volumes, " +
		"envtest TestStorageGrowsWhenTheClassAllowsIt",
	"update databases/finalizers.daytwo.dev":       finalizers,
	"update databasebackups/finalizers.daytwo.dev": finalizers,
	"update webapps/finalizers.daytwo.dev":         finalizers,
	"patch events": "client-go's recorder patches a core Event it sent before when it repeats " +
		"(leader election's, from the same pod); a run sends each once",
}

const (
	autoscaling = "WebApp autoscaling; the real node has no metrics server, envtest TestAutoscalingLeavesReplicasToTheHPA"
	ingress     = "WebApp ingress; the real node has no ingress controller, envtest TestIngressFollowsTheSpec"
	finalizers  = "no request: an owner reference that blocks deletion needs it where the " +
		"OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift), not here"
)

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
			User           struct{ Username string } `json:"user"`
			Verb           string                    `json:"verb"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
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
		name := resourceName(ev.ObjectRef.APIGroup, res)
		out[grant{name, ev.Verb}]++
		// A server-side apply that creates is a patch answered 201, and
		// needs create too.
		if ev.Verb == "patch" && ev.ResponseStatus.Code == 201 {
			out[grant{name, "create"}]++
		}
	}
	return out, sc.Err()
}

// readVerbs are one grant: get and list show nothing watch does not (and
// an informer's list is a streaming watch on a current API server, its
// get a read of its cache).
var readVerbs = []string{"get", "list", "watch"}

// readUsed says whether resource was read at all.
func readUsed(calls map[grant]int, resource string) bool {
	for _, v := range readVerbs {
		if calls[grant{resource, v}] > 0 {
			return true
		}
	}
	return false
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
		if calls[g] > 0 || (slices.Contains(readVerbs, g.verb) && readUsed(calls, g.resource)) {
			continue
		}
		if why, ok := unexercised[g.String()]; ok {
			explained = append(explained, g.String()+" ("+why+")")
			continue
		}
		unused = append(unused, g.String())
	}
	for v := range unexercised {
		if !grants[grant{resource: strings.Fields(v)[1], verb: strings.Fields(v)[0]}] {
			unused = append(unused, v+" (explained in unexercised, but no longer granted: drop the entry)")
		}
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
			"or say in unexercised, test/e2e/framework/audit.go, why a run cannot use them):\n  %s", strings.Join(unused, "\n  "))
	}
	return summary, nil
}
