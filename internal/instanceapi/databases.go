package instanceapi

import (
	"context"
	"fmt"
	"time"
)

// PathDatabases (POST, authenticated, a DatabasesRequest) makes the
// primary's declared databases, their schemas and extensions as the
// request says and answers a DatabasesResult, one DatabaseResult per
// database in the request's order. A replica answers 409. Databases the
// request does not name are left alone.
const PathDatabases = "/databases"

// DatabasesRequest is the body of POST /databases.
type DatabasesRequest struct {
	Databases []DeclaredDatabase `json:"databases"`
}

// DeclaredDatabase is one of a Database's spec.databases, as the primary
// applies it.
type DeclaredDatabase struct {
	Name string `json:"name"`
	// Absent drops the database; the other fields are then unused.
	Absent     bool                `json:"absent,omitempty"`
	Owner      string              `json:"owner"`
	Schemas    []DeclaredSchema    `json:"schemas,omitempty"`
	Extensions []DeclaredExtension `json:"extensions,omitempty"`
}

// DeclaredSchema is a schema of a declared database.
type DeclaredSchema struct {
	Name   string `json:"name"`
	Owner  string `json:"owner"`
	Absent bool   `json:"absent,omitempty"`
}

// DeclaredExtension is an extension of a declared database.
type DeclaredExtension struct {
	Name string `json:"name"`
	// Version is the version to run; empty takes the default version on
	// creation and leaves it after.
	Version string `json:"version,omitempty"`
	// Schema is where its objects go; empty is the database's default.
	Schema string `json:"schema,omitempty"`
	Absent bool   `json:"absent,omitempty"`
}

// DatabasesResult is the answer to POST /databases.
type DatabasesResult struct {
	Databases []DatabaseResult `json:"databases"`
}

// DatabaseResult is what the primary did about one database.
type DatabaseResult struct {
	Name string `json:"name"`
	// Exists says the database exists after the call.
	Exists bool `json:"exists"`
	// Changed lists what was made or put back: "created", "dropped",
	// "owner", "schema <name> ...", "extension <name> ...".
	Changed []string `json:"changed,omitempty"`
	// Error is PostgreSQL's message when it refused a change (the first;
	// the other objects were still tried).
	Error string `json:"error,omitempty"`
	// Extensions are the installed extensions' versions, by name.
	Extensions map[string]string `json:"extensions,omitempty"`
}

// Databases asks the primary at t to apply databases.
func (c *Client) Databases(ctx context.Context, t Target, token string, databases []DeclaredDatabase) (DatabasesResult, error) {
	var res DatabasesResult
	if err := c.post(ctx, t, PathDatabases, token, DatabasesRequest{Databases: databases}, &res, 60*time.Second); err != nil {
		return res, err
	}
	if len(res.Databases) != len(databases) {
		return res, fmt.Errorf("instance %s answered %d databases for %d asked", t, len(res.Databases), len(databases))
	}
	return res, nil
}
