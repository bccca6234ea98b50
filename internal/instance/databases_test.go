package instance_test

import (
	"context"
	"net/http"
	"slices"
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
	apply := func(want ...string) instanceapi.DatabasesResult {
		t.Helper()
		var res instanceapi.DatabasesResult
		if code := post(t, in, instanceapi.PathDatabases, apiToken, instanceapi.DatabasesRequest{Databases: dbs}, &res); code != http.StatusOK {
			t.Fatalf("POST %s answered %d", instanceapi.PathDatabases, code)
		}
		var got []string
		for _, d := range res.Databases {
			for _, c := range d.Changed {
				got = append(got, d.Name+": "+c)
			}
			if d.Error != "" {
				got = append(got, d.Name+" failed: "+d.Error)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("applying the databases changed %q, want %q", got, want)
		}
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

	// Absent: a database someone is connected to is not dropped, and
	// PostgreSQL says why; once nobody is, it is. An extension and a schema
	// go too.
	c, err := in.connect(ctx, "inventory_owner", "inv-pass-1", "inventory")
	if err != nil {
		t.Fatal(err)
	}
	dbs[0] = instanceapi.DeclaredDatabase{Name: "inventory", Absent: true}
	dbs[1].Extensions[0].Absent = true
	res = apply("inventory failed: database \"inventory\" is being accessed by other users: There is 1 other session using the database.",
		"orders: extension citext dropped")
	if !res.Databases[0].Exists {
		t.Fatal("a database in use was reported dropped")
	}
	_ = c.Close(ctx)
	apply("inventory: dropped")
	if got := in.superuser("SELECT count(*) FROM pg_database WHERE datname = 'inventory'"); got != "0" {
		t.Fatal("the dropped database is still there")
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
