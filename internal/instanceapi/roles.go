package instanceapi

import (
	"context"
	"fmt"
	"time"
)

// PathRoles (POST, authenticated, a RolesRequest) makes the primary's
// declared roles as the request says and answers a RolesResult, one
// RoleResult per role in the request's order. A replica answers 409.
// Roles the request does not name are left alone.
const PathRoles = "/roles"

// RolesRequest is the body of POST /roles.
type RolesRequest struct {
	Roles []DeclaredRole `json:"roles"`
}

// DeclaredRole is one of a Database's spec.roles, as the primary applies it.
type DeclaredRole struct {
	Name string `json:"name"`
	// Absent drops the role; the other fields are then unused.
	Absent          bool       `json:"absent,omitempty"`
	Login           bool       `json:"login,omitempty"`
	CreateDB        bool       `json:"createdb,omitempty"`
	Inherit         bool       `json:"inherit,omitempty"`
	ConnectionLimit int32      `json:"connectionLimit"`
	ValidUntil      *time.Time `json:"validUntil,omitempty"`
	InRoles         []string   `json:"inRoles,omitempty"`
	// Password is the role's password, in clear over the API's mutual
	// TLS: the instance checks the stored verifier against it (drift) and
	// sends PostgreSQL a new verifier, never the password. Empty (a role
	// without login) removes any password.
	Password string `json:"password,omitempty"`
	// KeepPassword leaves the role's password as it is (Password unused):
	// a rotation's previous login, which works until its grace period
	// ends.
	KeepPassword bool `json:"keepPassword,omitempty"`
	// ActAs is the role a login becomes at once (ALTER ROLE ... SET
	// role), which it must be a member of: a rotation's twin acts as the
	// declared role. Empty: none.
	ActAs string `json:"actAs,omitempty"`
	// EndSessions ends the role's sessions: a login that may no longer
	// log in (a rotation's grace period ended), or one a rotation reuses
	// (sessions from its previous password).
	EndSessions bool `json:"endSessions,omitempty"`
}

// RolesResult is the answer to POST /roles.
type RolesResult struct {
	Roles []RoleResult `json:"roles"`
}

// RoleResult is what the primary did about one role.
type RoleResult struct {
	Name string `json:"name"`
	// Exists says the role exists after the call.
	Exists bool `json:"exists"`
	// Changed lists what was put back or made: "created", "dropped",
	// "login", "createdb", "inherit", "connection limit", "valid until",
	// "password", "membership in <role>", "acts as", "sessions ended".
	Changed []string `json:"changed,omitempty"`
	// Error is PostgreSQL's message when it refused a change.
	Error string `json:"error,omitempty"`
}

// Roles asks the primary at t to apply roles.
func (c *Client) Roles(ctx context.Context, t Target, token string, roles []DeclaredRole) (RolesResult, error) {
	var res RolesResult
	if err := c.post(ctx, t, PathRoles, token, RolesRequest{Roles: roles}, &res, 30*time.Second); err != nil {
		return res, err
	}
	if len(res.Roles) != len(roles) {
		return res, fmt.Errorf("instance %s answered %d roles for %d asked", t, len(res.Roles), len(roles))
	}
	return res, nil
}
