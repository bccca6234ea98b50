package instance

import (
	"slices"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func TestSynchronousStandbyNames(t *testing.T) {
	three := []string{"db-0", "db-1", "db-2"}
	tests := []struct {
		name      string
		r         instanceapi.Replication
		streaming []string
		want      string
	}{
		{"asynchronous", instanceapi.Replication{Instances: three}, []string{"db-1", "db-2"}, ""},
		{"required names every other instance, streaming or not",
			instanceapi.Replication{Instances: three, Synchronous: 1, Required: true}, nil, `ANY 1 ("db-1", "db-2")`},
		{"required never asks for more replicas than exist",
			instanceapi.Replication{Instances: []string{"db-0", "db-1"}, Synchronous: 2, Required: true}, nil, `ANY 1 ("db-1")`},
		{"preferred asks for no more than stream",
			instanceapi.Replication{Instances: three, Synchronous: 2}, []string{"db-2"}, `ANY 1 ("db-1", "db-2")`},
		{"preferred with none streaming is asynchronous",
			instanceapi.Replication{Instances: three, Synchronous: 1}, nil, ""},
		{"preferred ignores a client that is no instance",
			instanceapi.Replication{Instances: three, Synchronous: 1}, []string{"pg_basebackup"}, ""},
		{"preferred with all streaming", instanceapi.Replication{Instances: three, Synchronous: 2}, []string{"db-1", "db-2"},
			`ANY 2 ("db-1", "db-2")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := synchronousStandbyNames(tt.r, "db-0", tt.streaming); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSlotChanges(t *testing.T) {
	three := []string{"db-0", "db-1", "db-2"}
	tests := []struct {
		name         string
		instances    []string
		existing     []string
		create, drop []string
	}{
		{"a new primary makes one slot per other instance", three, nil, []string{"daytwo_db_1", "daytwo_db_2"}, nil},
		{"nothing to do", three, []string{"daytwo_db_1", "daytwo_db_2"}, nil, nil},
		{"its own slot from an earlier primary goes", three, []string{"daytwo_db_0", "daytwo_db_1", "daytwo_db_2"}, nil, []string{"daytwo_db_0"}},
		{"a scaled-down instance's slot goes", three[:2], []string{"daytwo_db_1", "daytwo_db_2"}, nil, []string{"daytwo_db_2"}},
		{"no instance list (an older operator): hands off", nil, []string{"daytwo_db_1"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			create, drop := slotChanges(tt.instances, "db-0", tt.existing)
			if !slices.Equal(create, tt.create) || !slices.Equal(drop, tt.drop) {
				t.Fatalf("create %v drop %v, want create %v drop %v", create, drop, tt.create, tt.drop)
			}
		})
	}
	if got := slotName("orders-db-10"); got != "daytwo_orders_db_10" {
		t.Errorf("slot name %q", got)
	}
}
