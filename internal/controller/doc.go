// Package controller holds what the per-kind reconcilers share; each kind's
// reconciler lives in its own sub-package.
package controller
