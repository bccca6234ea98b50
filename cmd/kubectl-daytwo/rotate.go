package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// rotatePasswordCmd asks for one rotation of a declared login role's
// generated password (the rotate.daytwo.dev/<role> annotation); the
// operator rotates it and says so in status.roles and an Event.
func rotatePasswordCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-password DATABASE ROLE",
		Short: "Rotate a declared role's generated password, the old one working for its grace period",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			role := args[1]
			i := slices.IndexFunc(db.Spec.Roles, func(r v1alpha1.DatabaseRole) bool { return r.Name == role })
			switch {
			case i < 0:
				return fmt.Errorf("no role %s in spec.roles of Database %s", role, db.Name)
			case !db.Spec.Roles[i].Login || db.Spec.Roles[i].Ensure == v1alpha1.RoleEnsureAbsent:
				return fmt.Errorf("role %s cannot log in: it has no password to rotate", role)
			case db.Spec.Roles[i].PasswordSecret != nil:
				return fmt.Errorf("role %s's password is Secret %s's: change it there", role, db.Spec.Roles[i].PasswordSecret.Name)
			case v1alpha1.TwinProblem(role) != "":
				return fmt.Errorf("role %s's password cannot rotate: %s", role, v1alpha1.TwinProblem(role))
			}
			var last time.Time
			for _, s := range db.Status.Roles {
				if s.Name == role && s.LastRotationTime != nil {
					last = s.LastRotationTime.Time
				}
			}
			key := v1alpha1.AnnotationRotatePrefix + role
			patch := client.MergeFrom(db.DeepCopy())
			if db.Annotations == nil {
				db.Annotations = map[string]string{}
			}
			at := laterThan(last, db.Annotations[key])
			db.Annotations[key] = at
			if err := e.c.Patch(ctx, db, patch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Requested a rotation of role %s's password at %s; Secret %s changes once the primary has the new one (status.roles[%d].lastRotationTime)\n",
				role, at, db.RoleSecretName(role), i)
			return nil
		},
	}
}
