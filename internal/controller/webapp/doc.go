// Package webapp reconciles WebApps: a Deployment, Service, HPA, PDB and
// Ingress per app, with config-driven restarts and automatic rollback.
package webapp
