package instanceapi

import "testing"

func TestSynchronousStandbyNames(t *testing.T) {
	three := []string{"db-0", "db-1", "db-2"}
	tests := []struct {
		name      string
		r         Replication
		streaming []string
		want      string
	}{
		{"asynchronous", Replication{Instances: three}, []string{"db-1", "db-2"}, ""},
		{"required names every other instance, streaming or not",
			Replication{Instances: three, Synchronous: 1, Required: true}, nil, `ANY 1 ("db-1", "db-2")`},
		{"required never asks for more replicas than exist",
			Replication{Instances: []string{"db-0", "db-1"}, Synchronous: 2, Required: true}, nil, `ANY 1 ("db-1")`},
		{"preferred asks for no more than stream",
			Replication{Instances: three, Synchronous: 2}, []string{"db-2"}, `ANY 1 ("db-1", "db-2")`},
		{"preferred with none streaming is asynchronous",
			Replication{Instances: three, Synchronous: 1}, nil, ""},
		{"preferred ignores a client that is no instance",
			Replication{Instances: three, Synchronous: 1}, []string{"pg_basebackup"}, ""},
		{"preferred with all streaming", Replication{Instances: three, Synchronous: 2}, []string{"db-1", "db-2"},
			`ANY 2 ("db-1", "db-2")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SynchronousStandbyNames(tt.r, "db-0", tt.streaming); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
