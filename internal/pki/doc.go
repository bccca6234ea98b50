// Package pki makes and checks the X.509 material daytwo issues itself
// without cert-manager: a CA per Database (and one for the webhook),
// server certificates for PostgreSQL and the instance API, and client
// certificates for the operator's calls to instance managers.
package pki
