// Package webhook is daytwo's validating admission webhook: it refuses at
// admission what the CRD schema and its CEL rules cannot check (a cron
// expression that does not parse, a time zone the tz database does not
// know, an image of another PostgreSQL major than spec.version), with the
// field named, as Kubernetes' own CronJob does. It also keeps the serving
// certificate, which the operator manages itself.
package webhook
