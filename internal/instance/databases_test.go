package instance_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Declared databases on a real primary: made with their owner, schemas and
// extensions (one at an older version, then updated), left alone when
// nothing changed, an owner changed by hand put back, and dropped when
// absent unless someone is connected (PostgreSQL says so).
func TestDeclaredDatabasesAreMadeKeptAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInstance(t)
	in.writeFile("secrets/api-token", apiToken)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.superuser("CREATE ROLE inventory_owner LOGIN PASSWORD 'inv-pass-1'")

	dbs := []instanceapi.DeclaredDatabase{
		{Name: "inventory", Owner: "inventory_owner",
			Schemas:    []instanceapi.DeclaredSchema{{Name: "stock", Owner: "inventory_owner"}},
			Extensions: []instanceapi.DeclaredExtension{{Name: "pg_trgm", Version: "1.4"}, {Name: "hstore", Schema: "ext"}}},
		{Name: "orders", Owner: "shop", Extensions: []instanceapi.DeclaredExtension{{Name: "citext"}}},
	}
	apply := func(want ...string) (res instanceapi.DatabasesResult) {
		t.Helper()
		applyDeclared(t, in, instanceapi.PathDatabases, instanceapi.DatabasesRequest{Databases: dbs}, &res, want...)
		return res
	}
	res := apply("inventory: created", "inventory: schema stock created", "inventory: extension pg_trgm created",
		"inventory: extension hstore created", "orders: extension citext created")
	if v := res.Databases[0].Extensions["pg_trgm"]; v != "1.4" {
		t.Fatalf("pg_trgm runs %q, want the 1.4 asked for", v)
	}
	if err := in.execAs(ctx, "inventory_owner", "inv-pass-1", "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if got := in.superuserIn("inventory", "SELECT pg_get_userbyid(d.datdba) || ':' || (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'stock') || ':' || "+
		"(SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'hstore') || ':' || "+
		"ext.fetchval('a=>1'::ext.hstore, 'a') FROM pg_database d WHERE datname = 'inventory'"); got != "inventory_owner:inventory_owner:ext:1" {
		t.Fatalf("inventory's owner:stock's owner:hstore's schema:a use of it = %s", got)
	}

	// Nothing changed: nothing to do.
	apply()

	// A newer version is asked for: updated in place. An owner changed by
	// hand is put back.
	dbs[0].Extensions[0].Version = "1.6"
	in.superuser("ALTER DATABASE inventory OWNER TO shop")
	apply("inventory: extension pg_trgm updated to 1.6", "inventory: owner")

	// Absent: an extension and a schema go; a database is never dropped
	// from here (its data would go with a word in a spec).
	dbs[0].Schemas[0].Absent = true
	dbs[0].Extensions = nil
	dbs[1].Extensions[0].Absent = true
	apply("inventory: schema stock dropped", "orders: extension citext dropped")
	dbs[0] = instanceapi.DeclaredDatabase{Name: "inventory", Absent: true}
	res = apply("inventory failed: a database is not dropped by daytwo; DROP DATABASE it yourself")
	if !res.Databases[0].Exists {
		t.Fatal("the database was reported gone")
	}

	// An untrusted extension (its scripts need a superuser) only goes in a
	// schema a superuser owns: none given, or the owner's, is refused; a
	// new one daytwo makes, with USAGE for the owner.
	dbs = []instanceapi.DeclaredDatabase{{Name: "orders", Owner: "shop", Schemas: []instanceapi.DeclaredSchema{{Name: "mine", Owner: "shop"}},
		Extensions: []instanceapi.DeclaredExtension{{Name: "pg_buffercache"}}}}
	apply("orders failed: extension pg_buffercache is not trusted (its scripts need a superuser): give it a schema of its own, which daytwo makes owned by the superuser",
		"orders: schema mine created")
	dbs[0].Extensions[0].Schema = "mine"
	apply("orders failed: extension pg_buffercache is not trusted and schema mine is owned by shop, not a superuser: its scripts would run as superuser among objects shop controls")
	dbs[0].Extensions[0].Schema = "monitoring"
	apply("orders: extension pg_buffercache created")
	if got := in.superuserIn("orders", "SELECT pg_get_userbyid(nspowner) || ':' || has_schema_privilege('shop', oid, 'USAGE') || ':' || has_schema_privilege('shop', oid, 'CREATE') FROM pg_namespace WHERE nspname = 'monitoring'"); got != "postgres:true:false" {
		t.Fatalf("schema monitoring owner:shop's usage:shop's create = %s, want postgres:true:false", got)
	}

	// A name the API's schema would refuse is refused here too.
	if code := post(t, in, instanceapi.PathDatabases, apiToken, instanceapi.DatabasesRequest{Databases: []instanceapi.DeclaredDatabase{
		{Name: "x", Owner: "shop", Extensions: []instanceapi.DeclaredExtension{{Name: "pg_trgm", Version: "1'; DROP TABLE items; --"}}}}}, nil); code != http.StatusBadRequest {
		t.Fatalf("an extension version with a quote answered %d, want 400", code)
	}
	if strings.Contains(in.superuser("SELECT count(*) FROM pg_database WHERE datname = 'x'"), "1") {
		t.Fatal("a refused request made a database")
	}
}
