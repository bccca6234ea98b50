package database_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// When the primary moves, the new primary is labelled before the old one
// loses its label, so -rw never selects nothing in between (kube-proxy
// could apply that gap and keep it for its minimum sync period). A pod
// fenced on request keeps its label through the move, and loses it once
// its fence is lifted.
func TestNewPrimaryIsLabelledFirst(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for i, role := range []string{"primary", "replica", database.RoleFenced} {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%d", i), Namespace: ns, Labels: map[string]string{database.LabelRole: role}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: postgres.DefaultImage("15")}}}}
		if err := env.Client.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: pods[1].ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := database.LabelRoles(&database.Reconciler{Client: env.Client}, ctx, pods, "db-1", database.LabelledFenced); err != nil {
		t.Fatal(err)
	}
	var order []string
	for len(order) < 2 {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == "MODIFIED" {
				order = append(order, p.Name+"="+p.Labels[database.LabelRole])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("saw only %v", order)
		}
	}
	if want := []string{"db-1=primary", "db-0=replica"}; !slices.Equal(order, want) {
		t.Fatalf("labels changed in the order %v, want %v", order, want)
	}
	if got := pods[2].Labels[database.LabelRole]; got != database.RoleFenced {
		t.Fatalf("the fenced pod was labelled %q through the move", got)
	}
	if err := database.LabelRoles(&database.Reconciler{Client: env.Client}, ctx, pods, "db-1", func(*corev1.Pod) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got := pods[2].Labels[database.LabelRole]; got != "replica" {
		t.Fatalf("the pod whose fence was lifted is labelled %q", got)
	}
}
