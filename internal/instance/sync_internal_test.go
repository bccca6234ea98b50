package instance

import (
	"slices"
	"testing"
)

func TestSlotChanges(t *testing.T) {
	t.Parallel()
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
