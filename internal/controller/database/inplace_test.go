package database

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// revisionData is what the StatefulSet controller stores in a
// ControllerRevision for db's StatefulSet: {"spec":{"template":...}}.
func revisionData(t *testing.T, db *v1alpha1.Database, image string) []byte {
	t.Helper()
	in := stsInputs{instanceImage: "localhost/daytwo:dev", image: image, major: "15", claimSize: ptr.To(resource.MustParse("20Gi"))}
	tmpl, err := json.Marshal(statefulSet(db, newPlan(db), in).Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(tmpl, &m); err != nil {
		t.Fatal(err)
	}
	m["$patch"] = "replace"
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"template": m}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCompareRevisions(t *testing.T) {
	withParams := func(p map[string]string) func(*v1alpha1.Database) {
		return func(d *v1alpha1.Database) { d.Spec.Parameters = p }
	}
	base := revisionData(t, newDB(), "postgres:15.1")
	tests := []struct {
		name string
		to   []byte
		want bool
	}{
		{"the same template", base, true},
		{"a restart-only setting", revisionData(t, newDB(withParams(map[string]string{"max_connections": "50"})), "postgres:15.1"), true},
		{"a new image", revisionData(t, newDB(), "postgres:15.2"), false},
		{"a setting and a new image", revisionData(t, newDB(withParams(map[string]string{"max_connections": "50"})), "postgres:15.2"), false},
		{"new resources", revisionData(t, newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeMedium }), "postgres:15.1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := compareRevisions(base, tt.to)
			if err != nil || got.settingsOnly != tt.want {
				t.Errorf("got %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if string(base) == string(tests[1].to) {
		t.Fatal("the setting did not change the template: the case above proves nothing")
	}
	if got, _ := compareRevisions(base, tests[1].to); got.params != newPlan(newDB(withParams(map[string]string{"max_connections": "50"}))).restartParameters() {
		t.Errorf("the newer revision's settings: %q", got.params)
	}
	if _, err := compareRevisions(base, []byte(`{"spec":{}}`)); err == nil {
		t.Error("a revision without a template compared")
	}
}

func TestDecideInPlace(t *testing.T) {
	running := func(loaded, started string) instanceapi.Status {
		return instanceapi.Status{Phase: instanceapi.PhaseRunning, ConfigHash: loaded, StartConfigHash: started}
	}
	tests := []struct {
		name   string
		s      instanceapi.Status
		known  bool
		asked  bool
		expect inPlaceVerdict
	}{
		{"no answer from the instance", instanceapi.Status{}, false, false, inPlaceWait},
		{"a manager that does not report its start", running("new", ""), true, false, inPlaceNo},
		{"started with the new file", running("new", "new"), true, false, inPlaceDone},
		{"started with the new file, asked", running("new", "new"), true, true, inPlaceDone},
		{"read the new file", running("new", "old"), true, false, inPlaceRestart},
		{"not read the new file yet", running("old", "old"), true, false, inPlaceWait},
		{"asked a moment ago, still running the old", running("new", "old"), true, true, inPlaceWait},
		{"restarting as asked", instanceapi.Status{Phase: instanceapi.PhaseStarting, StartConfigHash: "new"}, true, true, inPlaceWait},
		{"starting, not asked (a demoted primary, or asked before the operator restarted)",
			instanceapi.Status{Phase: instanceapi.PhaseStarting, StartConfigHash: "old"}, true, false, inPlaceWait},
		{"started above its file at its primary's values", func() instanceapi.Status {
			s := running("new", "new")
			s.RaisedSettings = []string{"max_connections"}
			return s
		}(), true, false, inPlaceWait},
	}
	for _, tt := range tests {
		if got := decideInPlace(tt.s, tt.known, "new", tt.asked); got != tt.expect {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.expect)
		}
	}
}

func TestInPlaceHealthy(t *testing.T) {
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "db-2"}}}
	run := instanceapi.PhaseRunning
	primary := instanceapi.Status{Role: instanceapi.RolePrimary, Phase: run, StartConfigHash: "h", Standbys: []string{"db-1", "db-2"}}
	replica := instanceapi.Status{Role: instanceapi.RoleReplica, Phase: run, Streaming: true, StartConfigHash: "h"}
	obs := func(mutate func(map[string]instanceapi.Status)) *observation {
		in := map[string]instanceapi.Status{"db-0": primary, "db-1": replica, "db-2": replica}
		if mutate != nil {
			mutate(in)
		}
		return &observation{View: ha.View{Pods: pods, Primary: "db-0", Instances: in}}
	}
	tests := []struct {
		name string
		obs  *observation
		want bool
	}{
		{"all streaming", obs(nil), true},
		{"the victim itself does not stream", obs(func(in map[string]instanceapi.Status) {
			s := in["db-2"]
			s.Streaming = false
			in["db-2"] = s
		}), true},
		{"another replica does not stream", obs(func(in map[string]instanceapi.Status) {
			s := in["db-1"]
			s.Streaming = false
			in["db-1"] = s
		}), false},
		{"the primary just restarted and lists no standby yet", obs(func(in map[string]instanceapi.Status) {
			p := in["db-0"]
			p.Standbys = nil
			in["db-0"] = p
		}), false},
		{"a primary that reports neither its start nor its standbys", obs(func(in map[string]instanceapi.Status) {
			in["db-0"] = instanceapi.Status{Role: instanceapi.RolePrimary, Phase: run}
		}), false},
		{"another replica at its primary's raised values", obs(func(in map[string]instanceapi.Status) {
			s := in["db-1"]
			s.RaisedSettings = []string{"max_connections"}
			in["db-1"] = s
		}), false},
		{"the primary does not list the victim (it is being restarted)", obs(func(in map[string]instanceapi.Status) {
			p := in["db-0"]
			p.Standbys = []string{"db-1"}
			in["db-0"] = p
		}), true},
		{"the primary lists only the victim", obs(func(in map[string]instanceapi.Status) {
			p := in["db-0"]
			p.Standbys = []string{"db-2"}
			in["db-0"] = p
		}), false},
		{"the primary is restarting", obs(func(in map[string]instanceapi.Status) {
			in["db-0"] = instanceapi.Status{Role: instanceapi.RolePrimary, Phase: instanceapi.PhaseStarting}
		}), false},
	}
	for _, tt := range tests {
		if got := inPlaceHealthy(tt.obs, "db-2"); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
