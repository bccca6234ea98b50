package database

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// reconcileDatabases makes spec.databases on the primary, after the roles
// that own them: one call to the primary's instance manager, which makes
// each database, its schemas and extensions, and puts back an owner
// changed by hand. A primary that cannot be asked leaves them Pending.
func (r *Reconciler) reconcileDatabases(ctx context.Context, db *v1alpha1.Database, obs *observation) {
	if len(db.Spec.Databases) == 0 {
		return
	}
	statuses := make([]v1alpha1.LogicalDatabaseStatus, len(db.Spec.Databases))
	obs.found.databases = statuses
	asked := make([]instanceapi.DeclaredDatabase, 0, len(db.Spec.Databases))
	var askedAt []int
	for i, d := range db.Spec.Databases {
		statuses[i] = v1alpha1.LogicalDatabaseStatus{Name: d.Name, State: v1alpha1.RolePending}
		if problem := db.DatabaseProblem(i); problem != "" {
			statuses[i].State, statuses[i].Message = v1alpha1.RoleFailed, problem
			continue
		}
		if waiting := ownersNotApplied(db, obs, d); len(waiting) > 0 {
			statuses[i].Message = "waiting for role " + strings.Join(waiting, ", ") + " of spec.roles"
			continue
		}
		asked, askedAt = append(asked, apiDatabase(db, d)), append(askedAt, i)
	}
	if len(asked) == 0 {
		return
	}
	t, token, err := r.primaryTarget(ctx, db, obs)
	var res instanceapi.DatabasesResult
	if err == nil {
		if res, err = r.Instances.Databases(ctx, t, token, asked); err != nil {
			err = fmt.Errorf("the primary %s did not apply the databases: %w", obs.Primary, err)
		}
	}
	if err != nil {
		for _, i := range askedAt {
			statuses[i].Message = controller.Truncate(err.Error(), roleMessageMax)
		}
		return
	}
	for k, got := range res.Databases {
		st := &statuses[askedAt[k]]
		if got.Error != "" {
			st.State, st.Message = v1alpha1.RoleFailed, controller.Truncate(got.Error, roleMessageMax)
		} else {
			st.State = v1alpha1.RoleApplied
		}
		for _, name := range slices.Sorted(maps.Keys(got.Extensions)) {
			st.Extensions = append(st.Extensions, v1alpha1.ExtensionStatus{Name: name, Version: got.Extensions[name]})
		}
		if len(got.Changed) > 0 {
			controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "DatabaseApplied", "Apply",
				"Database %s: %s", got.Name, strings.Join(got.Changed, ", "))
		}
	}
}

// ownersNotApplied are the declared roles d or its schemas are owned by
// that the roles step has not applied (yet): the database waits for them.
func ownersNotApplied(db *v1alpha1.Database, obs *observation, d v1alpha1.LogicalDatabase) []string {
	applied := map[string]bool{}
	declared := map[string]bool{}
	for _, r := range db.Spec.Roles {
		declared[r.Name] = true
	}
	for _, s := range obs.found.roles {
		applied[s.Name] = s.State == v1alpha1.RoleApplied
	}
	var out []string
	for _, o := range append([]string{db.DatabaseOwner(d)}, schemaOwners(d)...) {
		if declared[o] && !applied[o] && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

func schemaOwners(d v1alpha1.LogicalDatabase) []string {
	var out []string
	for _, s := range d.Schemas {
		if s.Owner != "" {
			out = append(out, s.Owner)
		}
	}
	return out
}

// apiDatabase is d as the instance manager applies it, owners filled in.
func apiDatabase(db *v1alpha1.Database, d v1alpha1.LogicalDatabase) instanceapi.DeclaredDatabase {
	owner := db.DatabaseOwner(d)
	out := instanceapi.DeclaredDatabase{Name: d.Name, Owner: owner}
	for _, s := range d.Schemas {
		out.Schemas = append(out.Schemas, instanceapi.DeclaredSchema{Name: s.Name, Owner: cmp.Or(s.Owner, owner), Absent: s.Ensure == v1alpha1.RoleEnsureAbsent})
	}
	for _, e := range d.Extensions {
		out.Extensions = append(out.Extensions, instanceapi.DeclaredExtension{Name: e.Name, Version: e.Version, Schema: e.Schema,
			Absent: e.Ensure == v1alpha1.RoleEnsureAbsent})
	}
	return out
}

// databasesPhase applies spec.databases; databases that wait for the
// primary come back sooner than the instances' refresh.
func (r *Reconciler) databasesPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	r.reconcileDatabases(ctx, db, obs)
	for _, s := range obs.found.databases {
		if s.State == v1alpha1.RolePending {
			return stepResult{requeue: rolesRetry}, nil
		}
	}
	return stepResult{}, nil
}
