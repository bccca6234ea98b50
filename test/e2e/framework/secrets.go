//go:build e2e

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The secrets scan: before a suite's namespace goes, every secret value of
// its Secrets (passwords, tokens, private keys, S3 secret keys) is looked
// for in what anyone with read access to pods and events sees: every
// container's log (the instance managers, Jobs, and the rest), every
// Event, every daytwo object's status, and every pod's environment,
// arguments and termination messages. At the end, the operator's log is
// scanned for the secrets of every namespace.

// secretNeedle is one secret value and where it came from; the value is
// never printed.
type secretNeedle struct {
	value string
	from  string // namespace/secret key
}

// scanned collects the needles of every scanned namespace, for the
// operator's log at the end.
var scanned struct {
	sync.Mutex
	needles []secretNeedle
	places  int
}

// SecretKey says whether a Secret's key holds a secret: certificates,
// user names and host names are not.
func SecretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"password", "token", "secret", ".key", "uri"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// needlesOf are the secret values of s: whole values, and for a PEM
// private key its longest line (a partial print is still a leak).
func needlesOf(s *corev1.Secret) []secretNeedle {
	var out []secretNeedle
	for k, v := range s.Data {
		if !SecretKey(k) || len(v) < 8 {
			continue
		}
		from := s.Namespace + "/" + s.Name + "[" + k + "]"
		val := string(v)
		if strings.Contains(val, "PRIVATE KEY-----") {
			longest := ""
			for _, line := range strings.Split(val, "\n") {
				if !strings.HasPrefix(line, "-----") && len(line) > len(longest) {
					longest = line
				}
			}
			val = longest
		}
		out = append(out, secretNeedle{value: val, from: from})
	}
	return out
}

// leaks names each needle found in text, found at place.
func leaks(needles []secretNeedle, place, text string) []string {
	var out []string
	for _, n := range needles {
		if strings.Contains(text, n.value) {
			out = append(out, fmt.Sprintf("%s appears in %s", n.from, place))
		}
	}
	return out
}

// ScanSecrets looks for ns's secret values in its logs, Events, statuses
// and pod specs, and returns each place one appears (never the value).
func (c *Cluster) ScanSecrets(ctx context.Context, ns string) ([]string, error) {
	secrets := &corev1.SecretList{}
	if err := c.Client.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var needles []secretNeedle
	for i := range secrets.Items {
		needles = append(needles, needlesOf(&secrets.Items[i])...)
	}
	places := map[string]string{}
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		containers := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
		for _, ct := range containers {
			spec, _ := json.Marshal(struct {
				Command, Args []string
				Env           []corev1.EnvVar
			}{ct.Command, ct.Args, ct.Env})
			places[fmt.Sprintf("pod %s container %s command, args or env", p.Name, ct.Name)] = string(spec)
			if c.Mode == ModeReal {
				raw, err := c.Kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ct.Name}).DoRaw(ctx)
				if err == nil {
					places[fmt.Sprintf("pod %s container %s log", p.Name, ct.Name)] = string(raw)
				}
			}
		}
		statuses, _ := json.Marshal(append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...))
		places[fmt.Sprintf("pod %s status (termination messages)", p.Name)] = string(statuses)
	}
	events := &corev1.EventList{}
	if err := c.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, e := range events.Items {
		places[fmt.Sprintf("event %s %s/%s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name)] = e.Message
	}
	for _, list := range []client.ObjectList{&v1alpha1.DatabaseList{}, &v1alpha1.DatabaseBackupList{}, &v1alpha1.WebAppList{}} {
		if err := c.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(list)
		var items struct {
			Items []struct {
				Kind     string
				Metadata metav1.ObjectMeta `json:"metadata"`
				Status   json.RawMessage   `json:"status"`
			} `json:"items"`
		}
		_ = json.Unmarshal(raw, &items)
		for _, it := range items.Items {
			places[fmt.Sprintf("%T %s status", list, it.Metadata.Name)] = string(it.Status)
		}
	}
	var found []string
	for place, text := range places {
		found = append(found, leaks(needles, place, text)...)
	}
	sort.Strings(found)
	scanned.Lock()
	scanned.needles = append(scanned.needles, needles...)
	scanned.places += len(places)
	scanned.Unlock()
	return found, nil
}

// ScanOperatorLog looks for every scanned namespace's secrets in the
// operator's log, and says how many values and places were scanned.
func ScanOperatorLog(log string) (found []string, summary string) {
	scanned.Lock()
	defer scanned.Unlock()
	return leaks(scanned.needles, "the operator log", log),
		fmt.Sprintf("%d secret values looked for in %d places and the operator log", len(scanned.needles), scanned.places)
}
