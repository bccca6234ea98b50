package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

const (
	goodWebApp = `
apiVersion: daytwo.dev/v1alpha1
kind: WebApp
metadata: {name: x}
spec: {image: "nginx:1.27", port: 8080}
`
	goodDatabase = `
apiVersion: daytwo.dev/v1alpha1
kind: Database
metadata: {name: x}
spec: {version: "16", size: small}
`
	goodBackup = `
apiVersion: daytwo.dev/v1alpha1
kind: DatabaseBackup
metadata: {name: x}
spec:
  databaseRef: {name: x}
  schedule: "*/10 * * * *"
  storage:
    s3: {endpoint: "minio:9000", bucket: backups, credentialsSecretRef: {name: s3}}
`
)

// object parses a manifest and applies a JSON merge patch given as YAML, so
// each case only says what it breaks.
func object(t *testing.T, base, patch string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(base), &u.Object); err != nil {
		t.Fatalf("bad base manifest: %v", err)
	}
	if patch == "" {
		return u
	}
	p := map[string]any{}
	if err := yaml.Unmarshal([]byte(patch), &p); err != nil {
		t.Fatalf("bad patch: %v", err)
	}
	u.Object = merge(u.Object, p)
	return u
}

// merge is RFC 7386: maps merge, null deletes, anything else replaces.
func merge(dst, patch map[string]any) map[string]any {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			if dv, ok := dst[k].(map[string]any); ok {
				dst[k] = merge(dv, pv)
			} else {
				dst[k] = merge(map[string]any{}, pv)
			}
		default:
			dst[k] = v
		}
	}
	return dst
}

func TestGoodSpecsAreAccepted(t *testing.T) {
	ns := env.Namespace(t)
	for _, m := range []struct{ base, patch string }{
		{goodWebApp, ""},
		{goodDatabase, ""},
		{goodBackup, ""},
		{goodDatabase, `
metadata: {name: tuned}
spec:
  parameters:
    work_mem: 64MB
    search_path: '"$user", public, ext'
    log_line_prefix: '%m [%p] %q%u@%d '
    default_text_search_config: pg_catalog.english
    pg_stat_statements.track: all
    jit: "off"
    statement_timeout: "` + strings.Repeat("9", 1024) + `"`},
		{goodDatabase, "metadata: {name: many}\nspec: {parameters: " + parameters(64) + "}"},
		{goodDatabase, "metadata: {name: sync}\nspec: {instances: 3, replication: {synchronous: {number: 2, dataDurability: preferred}}}"},
		{goodBackup, "metadata: {name: physical}\nspec: {method: Physical}"},
		{goodBackup, "metadata: {name: physical-verified}\nspec: {method: Physical, verify: {everyNth: 1}}"},
		{goodBackup, "metadata: {name: zstd19}\nspec: {compression: zstd, compressionLevel: 19}"},
		{goodBackup, "metadata: {name: gzip}\nspec: {compression: gzip, compressionLevel: 9}"},
		{goodDatabase, "metadata: {name: logical-policy}\nspec: {backup: {method: Logical, compression: none, storage: {pvc: {claimName: c}}}}"},
		{goodDatabase, "metadata: {name: seed-shape}\nspec: {deletionPolicy: Snapshot, backup: {storage: {pvc: {claimName: c}}}}"},
		{goodDatabase, "metadata: {name: pitr}\nspec: {bootstrap: {initdb: null, fromBackup: {backupRef: {name: physical}, targetTime: \"2026-11-24T07:00:00Z\"}}}"},
		{goodDatabase, "metadata: {name: imported}\nspec: {bootstrap: {initdb: null, import: {host: old-pg.legacy.svc, databases: [shop, audit], credentialsSecret: {name: old-pg}}}}"},
		// A tier's instances are checked by the operator, which names the field too.
		{goodDatabase, "metadata: {name: sync-tier}\nspec: {size: large, replication: {synchronous: {number: 1}}}"},
	} {
		u := object(t, m.base, m.patch)
		u.SetNamespace(ns)
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Errorf("%s refused: %v", u.GetKind(), err)
		}
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	checks := []struct {
		manifest string
		path     []string
		want     any
	}{
		{goodWebApp, []string{"spec", "deletionPolicy"}, "Delete"},
		{goodWebApp, []string{"spec", "imagePullPolicy"}, "IfNotPresent"},
		{goodDatabase, []string{"spec", "deletionPolicy"}, "Retain"},
		{goodDatabase, []string{"spec", "bootstrap", "initdb", "database"}, "app"},
		{strings.Replace(goodDatabase, "size: small", "instances: 2, replication: {synchronous: {number: 1}}", 1),
			[]string{"spec", "replication", "synchronous", "dataDurability"}, "required"},
		{goodBackup, []string{"spec", "method"}, "Logical"},
		{goodBackup, []string{"spec", "concurrencyPolicy"}, "Forbid"},
		{goodBackup, []string{"spec", "missedRunPolicy"}, "RunOnce"},
		{goodBackup, []string{"spec", "retention", "keepLast"}, int64(7)},
		{goodBackup, []string{"spec", "storage", "s3", "credentialsSecretRef", "accessKeyIDKey"}, "AWS_ACCESS_KEY_ID"},
	}
	for i, c := range checks {
		u := object(t, c.manifest, fmt.Sprintf("metadata: {name: d%d}", i))
		u.SetNamespace(ns)
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("create %s: %v", u.GetKind(), err)
		}
		got, _, _ := unstructured.NestedFieldNoCopy(u.Object, c.path...)
		if got != c.want {
			t.Errorf("%s %s = %v (%T), want %v", u.GetKind(), strings.Join(c.path, "."), got, got, c.want)
		}
	}
}

func TestBadSpecsAreRefusedNamingTheField(t *testing.T) {
	ns := env.Namespace(t)
	cases := []struct {
		name, base, patch string
		want              []string // every substring must appear in the API server's message
	}{
		{"webapp without image", goodWebApp, `spec: {image: null}`, []string{"spec.image", "Required value"}},
		{"webapp port out of range", goodWebApp, `spec: {port: 70000}`, []string{"spec.port", "less than or equal to 65535"}},
		{"webapp mount of no volume", goodWebApp, `spec: {volumeMounts: [{name: x, mountPath: /x}]}`, []string{"spec", "every volumeMount must name one of spec.volumes"}},
		{"webapp volume of two sources", goodWebApp, `spec: {volumes: [{name: x, emptyDir: {}, secret: {secretName: s}}]}`, []string{"spec.volumes[0]", "exactly one of"}},
		{"webapp sidecar named app", goodWebApp, `spec: {sidecars: [{name: app, image: x}]}`, []string{"spec", "the container name app"}},
		{"database anti-affinity twice", goodDatabase, `spec: {placement: {antiAffinity: Required, affinity: {podAntiAffinity: {}}}}`, []string{"spec.placement.antiAffinity", "replaces"}},
		{"database daytwo.dev label", goodDatabase, `spec: {inheritedMetadata: {labels: {"daytwo.dev/role": primary}}}`, []string{"spec.inheritedMetadata.labels", "daytwo's own"}},
		{"database maintenance without schedule", goodDatabase, `spec: {maintenance: {duration: 1h}}`, []string{"spec.maintenance.schedule", "Required value"}},
		{"backup S3 without credentials", goodBackup, `spec: {storage: {s3: {credentialsSecretRef: null}}}`, []string{"spec.storage.s3", "exactly one of credentialsSecretRef, webIdentity and inheritFromEnvironment"}},
		{"backup S3 plain-HTTP STS", goodBackup, `spec: {storage: {s3: {credentialsSecretRef: null, webIdentity: {roleARN: r, stsEndpoint: "http://sts.example.com"}}}}`, []string{"spec.storage.s3.webIdentity.stsEndpoint", "https"}},
		{"webapp min above max", goodWebApp, `spec: {autoscaling: {minReplicas: 5, maxReplicas: 2}}`, []string{"spec.autoscaling", "minReplicas must not exceed maxReplicas"}},
		{"webapp bad ingress host", goodWebApp, `spec: {ingress: {host: "Shop_Example"}}`, []string{"spec.ingress.host"}},
		{"webapp unknown deletion policy", goodWebApp, `spec: {deletionPolicy: Keep}`, []string{"spec.deletionPolicy", "Unsupported value"}},
		{"webapp bad maxSurge", goodWebApp, `spec: {rollout: {maxSurge: "lots"}}`, []string{"spec.rollout.maxSurge", "percentage"}},
		{"webapp short progress deadline", goodWebApp, `spec: {rollout: {progressDeadlineSeconds: 1}}`, []string{"spec.rollout.progressDeadlineSeconds"}},
		{"webapp configRef of a Pod", goodWebApp, `spec: {configRefs: [{kind: Pod, name: a}]}`, []string{"spec.configRefs[0].kind", "Unsupported value"}},
		{"database replica source without prefix", goodDatabase, `spec: {replica: {source: {storage: {s3: {endpoint: e, bucket: b, credentialsSecretRef: {name: s}}}, seriesKeySecretRef: {name: k}}}}`, []string{"spec.replica.source", "with the prefix the source archives under"}},
		{"database replica restored from a backup", goodDatabase, `spec: {bootstrap: {initdb: null, fromBackup: {backupRef: {name: b}}}, replica: {source: {storage: {s3: {endpoint: e, bucket: b, prefix: p, credentialsSecretRef: {name: s}}}, seriesKeySecretRef: {name: k}}}}`, []string{"spec.bootstrap", "takes its data from spec.replica.source"}},
		{"database replica streaming without password", goodDatabase, `spec: {replica: {source: {host: src.example.com, caSecretRef: {name: ca}, storage: {s3: {endpoint: e, bucket: b, prefix: p, credentialsSecretRef: {name: s}}}, seriesKeySecretRef: {name: k}}}}`, []string{"spec.replica.source", "replicationPasswordSecretRef"}},
		{"database fenced instance of a bad name", goodDatabase, `spec: {fencedInstances: ["Orders_1"]}`, []string{"spec.fencedInstances[0]", "should match"}},
		{"database promotion token while following", goodDatabase, `spec: {replica: {promotionToken: t, source: {storage: {s3: {endpoint: e, bucket: bkt, prefix: p, credentialsSecretRef: {name: s}}}, seriesKeySecretRef: {name: k}}}}`, []string{"spec.replica", "a token is for the promotion"}},
		{"database lease term under its floor", goodDatabase, `spec: {ha: {leaseDurationSeconds: 4}}`, []string{"spec.ha.leaseDurationSeconds", "greater than or equal to 5"}},
		{"database lease term over its ceiling", goodDatabase, `spec: {ha: {leaseDurationSeconds: 61}}`, []string{"spec.ha.leaseDurationSeconds", "less than or equal to 60"}},
		{"database failover delay over its ceiling", goodDatabase, `spec: {ha: {failoverDelaySeconds: 301}}`, []string{"spec.ha.failoverDelaySeconds", "less than or equal to 300"}},
		{"database unsupported version", goodDatabase, `spec: {version: "12"}`, []string{"spec.version", "Unsupported value"}},
		{"database unknown size", goodDatabase, `spec: {size: huge}`, []string{"spec.size", "Unsupported value"}},
		{"database zero instances", goodDatabase, `spec: {instances: 0}`, []string{"spec.instances"}},
		{"database managed parameter", goodDatabase, `spec: {parameters: {listen_addresses: "*"}}`, []string{"spec.parameters", "must not set a setting daytwo manages"}},
		{"database malformed parameter name", goodDatabase, `spec: {parameters: {"Work Mem": "4MB"}}`, []string{"spec.parameters", "lower-case"}},
		{"database include directive", goodDatabase, `spec: {parameters: {include: /etc/passwd}}`, []string{"spec.parameters", "must not set", "include"}},
		{"database include_dir directive", goodDatabase, `spec: {parameters: {include_dir: /tmp}}`, []string{"spec.parameters", "must not set", "include_dir"}},
		{"database archive_cleanup_command", goodDatabase, `spec: {parameters: {archive_cleanup_command: "sh -c id"}}`, []string{"spec.parameters", "must not set", "archive_cleanup_command"}},
		{"database full_page_writes (torn pages, and pg_rewind needs it)", goodDatabase, `spec: {parameters: {full_page_writes: "off"}}`, []string{"spec.parameters", "must not set", "full_page_writes"}},
		{"database wal_level (replication and rewind need replica)", goodDatabase, `spec: {parameters: {wal_level: minimal}}`, []string{"spec.parameters", "must not set", "wal_level"}},
		{"database wal_log_hints (pg_rewind needs it)", goodDatabase, `spec: {parameters: {wal_log_hints: "off"}}`, []string{"spec.parameters", "must not set", "wal_log_hints"}},
		{"database synchronous_standby_names", goodDatabase, `spec: {parameters: {synchronous_standby_names: "*"}}`, []string{"spec.parameters", "must not set", "synchronous_standby_names"}},
		{"database ssl_passphrase_command", goodDatabase, `spec: {parameters: {ssl_passphrase_command: "sh -c id"}}`, []string{"spec.parameters", "must not set", "ssl_passphrase_command"}},
		{"database recovery target", goodDatabase, `spec: {parameters: {recovery_target_time: "2026-01-01"}}`, []string{"spec.parameters", "must not set", "recovery_target_time"}},
		{"database log_directory", goodDatabase, `spec: {parameters: {log_directory: /var/lib/postgresql}}`, []string{"spec.parameters", "must not set", "log_directory"}},
		{"database parameter value with a newline", goodDatabase, `spec: {parameters: {log_line_prefix: "a\narchive_command = 'id'"}}`, []string{"spec.parameters", "log_line_prefix", "control character"}},
		{"database parameter value with a tab", goodDatabase, `spec: {parameters: {log_line_prefix: "a\tb"}}`, []string{"spec.parameters", "log_line_prefix", "control character"}},
		{"database parameter value with DEL", goodDatabase, `spec: {parameters: {log_line_prefix: "a\x7Fb"}}`, []string{"spec.parameters", "log_line_prefix", "control character"}},
		{"database parameter value with a backslash", goodDatabase, `spec: {parameters: {search_path: 'app\'}}`, []string{"spec.parameters", "search_path", "backslash"}},
		{"database parameter value too long", goodDatabase, `spec: {parameters: {statement_timeout: "` + strings.Repeat("9", 1025) + `"}}`, []string{"spec.parameters", "statement_timeout", "1024"}},
		{"database too many parameters", goodDatabase, "spec: {parameters: " + parameters(65) + "}", []string{"spec.parameters", "must have at most 64 items"}},
		{"database two bootstraps", goodDatabase, `spec: {bootstrap: {initdb: {}, fromBackup: {backupRef: {name: b}}}}`, []string{"spec.bootstrap", "exactly one of initdb, fromBackup or import"}},
		{"database import beside initdb", goodDatabase, `spec: {bootstrap: {initdb: {}, import: {host: old-pg, databases: [shop], credentialsSecret: {name: s}}}}`,
			[]string{"spec.bootstrap", "exactly one of initdb, fromBackup or import"}},
		{"database import of nothing", goodDatabase, `spec: {bootstrap: {initdb: null, import: {host: old-pg, databases: [], credentialsSecret: {name: s}}}}`,
			[]string{"spec.bootstrap.import.databases"}},
		{"database import without credentials", goodDatabase, `spec: {bootstrap: {initdb: null, import: {host: old-pg, databases: [shop]}}}`,
			[]string{"spec.bootstrap.import.credentialsSecret"}},
		{"database superuser owner", goodDatabase, `spec: {bootstrap: {initdb: {owner: postgres}}}`, []string{"spec.bootstrap.initdb.owner"}},
		{"database synchronous replicas not below instances", goodDatabase, `spec: {instances: 2, replication: {synchronous: {number: 2}}}`, []string{"spec", "spec.replication.synchronous.number must be below spec.instances"}},
		{"database synchronous number zero", goodDatabase, `spec: {instances: 2, replication: {synchronous: {number: 0}}}`, []string{"spec.replication.synchronous.number"}},
		{"database unknown data durability", goodDatabase, `spec: {instances: 2, replication: {synchronous: {number: 1, dataDurability: best}}}`, []string{"spec.replication.synchronous.dataDurability", "Unsupported value"}},
		{"database snapshot without storage", goodDatabase, `spec: {deletionPolicy: Snapshot}`, []string{"spec", "needs spec.backupStorage"}},
		{"backup without databaseRef", goodBackup, `spec: {databaseRef: null}`, []string{"spec.databaseRef", "Required value"}},
		{"backup without storage backend", goodBackup, `spec: {storage: {s3: null}}`, []string{"spec.storage", "exactly one of s3 or pvc"}},
		{"backup with two storage backends", goodBackup, `spec: {storage: {pvc: {claimName: c}}}`, []string{"spec.storage", "exactly one of s3 or pvc"}},
		{"backup schedule in prose", goodBackup, `spec: {schedule: "every day at noon"}`, []string{"spec.schedule"}},
		{"backup compression unknown", goodBackup, `spec: {compression: lz4}`, []string{"spec.compression", "Unsupported value"}},
		{"backup gzip level too high", goodBackup, `spec: {compression: gzip, compressionLevel: 12}`, []string{"spec", "gzip takes 1 to 9"}},
		{"backup no compression with a level", goodBackup, `spec: {compression: none, compressionLevel: 3}`, []string{"spec", "none takes no level"}},
		{"backup zstd level too high", goodBackup, `spec: {compressionLevel: 23}`, []string{"spec.compressionLevel"}},
		{"backup physical with compression", goodBackup, `spec: {method: Physical, compression: gzip}`, []string{"spec", "compression applies to Logical backups"}},
		{"database backup policy physical with compression", goodDatabase, `spec: {backup: {storage: {pvc: {claimName: c}}, compressionLevel: 3}}`,
			[]string{"spec.backup", "compression applies to Logical backups"}},
		{"database backup policy without storage", goodDatabase, `spec: {backup: {schedule: "@daily"}}`, []string{"spec.backup.storage", "Required value"}},
		{"database two recovery targets", goodDatabase, `spec: {bootstrap: {initdb: null, fromBackup: {backupRef: {name: b}, targetTime: "2026-11-24T07:00:00Z", targetLSN: "0/3000060"}}}`,
			[]string{"spec.bootstrap.fromBackup", "targetTime or targetLSN, not both"}},
		{"database recovery target not an LSN", goodDatabase, `spec: {bootstrap: {initdb: null, fromBackup: {backupRef: {name: b}, targetLSN: "3000060"}}}`,
			[]string{"spec.bootstrap.fromBackup.targetLSN"}},
		{"backup retention keeps nothing", goodBackup, `spec: {retention: {keepLast: 0}}`, []string{"spec.retention", "at least one backup"}},
		{"backup verify two triggers", goodBackup, `spec: {verify: {everyNth: 2, schedule: "@daily"}}`, []string{"spec.verify", "exactly one of everyNth or schedule"}},
		{"backup upper-case bucket", goodBackup, `spec: {storage: {s3: {bucket: "Backups"}}}`, []string{"spec.storage.s3.bucket"}},
		{"backup endpoint with scheme", goodBackup, `spec: {storage: {s3: {endpoint: "https://s3.example.com"}}}`, []string{"spec.storage.s3.endpoint"}},
		{"backup maxAge in days", goodBackup, `spec: {maxAge: "1d"}`, []string{"spec.maxAge"}},
		{"backup pvc path escapes", goodBackup, `spec: {storage: {s3: null, pvc: {claimName: c, path: "a/../../etc"}}}`, []string{"spec.storage.pvc.path", "must not contain '..'"}},
		{"backup unknown concurrency policy", goodBackup, `spec: {concurrencyPolicy: Sometimes}`, []string{"spec.concurrencyPolicy", "Unsupported value"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := object(t, c.base, c.patch)
			u.SetNamespace(ns)
			u.SetGenerateName("bad-")
			u.SetName("")
			err := env.Client.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("accepted, want refusal mentioning %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not mention %q", err.Error(), w)
				}
			}
		})
	}
}

// parameters is a YAML flow map of n distinct settings.
func parameters(n int) string {
	kv := make([]string, n)
	for i := range kv {
		kv[i] = fmt.Sprintf("custom.p%d: x", i)
	}
	return "{" + strings.Join(kv, ", ") + "}"
}

func TestBadUpdatesAreRefusedNamingTheField(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	cases := []struct {
		name, base, patch string
		want              []string
	}{
		{"database bootstrap changed", goodDatabase, `spec: {bootstrap: {initdb: {database: other}}}`, []string{"spec.bootstrap", "bootstrap is immutable"}},
		{"database bootstrap swapped for a restore", goodDatabase, `spec: {bootstrap: {initdb: null, fromBackup: {backupRef: {name: b}}}}`, []string{"spec.bootstrap", "bootstrap is immutable"}},
		{"database version downgrade", goodDatabase, `spec: {version: "15"}`, []string{"spec.version", "must not go down"}},
		{"backup method changed", goodBackup, `spec: {method: Physical}`, []string{"spec", "method cannot change"}},
		{"database demoted and promoted at once", goodDatabase, `spec: {replica: {enabled: false, source: {storage: {s3: {endpoint: e, bucket: bkt, prefix: p, credentialsSecretRef: {name: s}}}, seriesKeySecretRef: {name: k}}}}`, []string{"spec.replica", "demotes it, so enabled must be true"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := object(t, c.base, fmt.Sprintf("metadata: {name: u%d}", i))
			u.SetNamespace(ns)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("create: %v", err)
			}
			changed := object(t, c.base, c.patch)
			u.Object["spec"] = merge(u.Object["spec"].(map[string]any), changed.Object["spec"].(map[string]any))
			err := env.Client.Update(ctx, u)
			if err == nil {
				t.Fatalf("update accepted, want refusal mentioning %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not mention %q", err.Error(), w)
				}
			}
		})
	}
}
